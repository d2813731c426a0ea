// Package hive registers a file sink's partitions in a Hive Metastore: a
// [filesink.CommitPolicy] that creates the table if it is absent (EXTERNAL,
// its columns from the record's struct, its partition keys from the sink's
// PartitionBy) and adds each committed partition, idempotently, over the
// Metastore's Thrift API.
//
// The policy runs in the file sink's committer, off the checkpoint's
// commit: a Metastore that is down holds no Kafka commit back; the
// partitions wait, in every checkpoint, and are added when it answers
// again ([filesink.CommitPartitions]).
package hive

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/apache/thrift/lib/go/thrift"
	"github.com/beltran/gohive/hive_metastore"

	"github.com/kordproject/kord/filesink"
	"github.com/kordproject/kord/keyed"
)

// Storage is how the table's files are stored: their SerDe and formats.
type Storage struct {
	name         string
	serde        string
	inputFormat  string
	outputFormat string
}

var (
	// Parquet is filesink.Parquet's files.
	Parquet = Storage{"parquet", "org.apache.hadoop.hive.ql.io.parquet.serde.ParquetHiveSerDe",
		"org.apache.hadoop.hive.ql.io.parquet.MapredParquetInputFormat", "org.apache.hadoop.hive.ql.io.parquet.MapredParquetOutputFormat"}
	// JSONLines is filesink.JSONLines' uncompressed files (Hive's JsonSerDe
	// over text).
	JSONLines = Storage{"jsonlines", "org.apache.hadoop.hive.serde2.JsonSerDe",
		"org.apache.hadoop.mapred.TextInputFormat", "org.apache.hadoop.hive.ql.io.HiveIgnoreKeyTextOutputFormat"}
)

// Column is a column of the table: a name and a Hive type ("bigint").
type Column struct{ Name, Type string }

// Policy is the commit policy that registers partitions in a table.
type Policy struct {
	addr     string
	db, tbl  string
	location string
	storage  Storage
	cols     []Column
	colsErr  error
	timeout  time.Duration

	mu    sync.Mutex
	ready bool // the table was found or created, and checked
}

// Opt configures a Policy.
type Opt func(*Policy)

// StoredAs sets the table's storage. Default: Parquet.
func StoredAs(s Storage) Opt { return func(p *Policy) { p.storage = s } }

// Columns sets the table's columns, instead of those Table derives from
// the record's struct.
func Columns(cols ...Column) Opt { return func(p *Policy) { p.cols, p.colsErr = cols, nil } }

// Timeout bounds each connection to the Metastore and each call. Default:
// 30 s (or the caller's deadline, if sooner).
func Timeout(d time.Duration) Opt { return func(p *Policy) { p.timeout = d } }

// Table returns the policy that registers the sink's partitions in table
// db.table (the database created, at location's parent, if absent) of the
// Metastore at addr (host:port, Thrift without SASL),
// whose files are at location (a URL the Metastore's readers resolve:
// "file:///data/lake/events", "s3a://bucket/events"): the sink's target.
// The columns are T's exported fields, named by their parquet, then json
// tag, else the field's name, lowercased; Go's types map to Hive's
// (string, bigint, int, smallint, tinyint, double, float, boolean, binary,
// timestamp). A table that exists must have those columns and the sink's
// partition keys (all strings): otherwise the policy fails permanently
// (keyed.Permanent), naming the difference.
func Table[T any](addr, db, table, location string, opts ...Opt) *Policy {
	p := &Policy{addr: addr, db: strings.ToLower(db), tbl: strings.ToLower(table), location: strings.TrimSuffix(location, "/"),
		storage: Parquet, timeout: 30 * time.Second}
	p.cols, p.colsErr = columnsOf(reflect.TypeFor[T]())
	for _, o := range opts {
		o(p)
	}
	return p
}

// String names the policy in the sink's errors.
func (p *Policy) String() string {
	return fmt.Sprintf("hive metastore %s, table %s.%s", p.addr, p.db, p.tbl)
}

func (p *Policy) errorf(format string, args ...any) error {
	return fmt.Errorf("hive: metastore %s, table %s.%s: "+format, append([]any{p.addr, p.db, p.tbl}, args...)...)
}

// CommitPartition implements filesink.CommitPolicy: the table is created
// or checked (once), then the partition added if absent.
func (p *Policy) CommitPartition(ctx context.Context, part filesink.Partition) error {
	if p.colsErr != nil {
		return keyed.Permanent(p.errorf("%w", p.colsErr))
	}
	c, err := p.dial(ctx)
	if err != nil {
		return err
	}
	defer c.close()
	p.mu.Lock()
	ready := p.ready
	p.mu.Unlock()
	if !ready {
		if err := p.ensureTable(ctx, c, part.Columns); err != nil {
			return err
		}
		p.mu.Lock()
		p.ready = true
		p.mu.Unlock()
	}
	req := &hive_metastore.AddPartitionsRequest{DbName: p.db, TblName: p.tbl, IfNotExists: true,
		Parts: []*hive_metastore.Partition{{DbName: p.db, TableName: p.tbl, Values: part.Values,
			Sd: p.sd(p.location + "/" + part.Path), Parameters: map[string]string{}}}}
	if _, err := c.hms.AddPartitionsReq(ctx, req); err != nil {
		return p.errorf("adding partition %s: %w", part.Path, err)
	}
	return nil
}

// Partitions lists the table's partitions ("dt=2026-12-03/hr=08"),
// ascending.
func (p *Policy) Partitions(ctx context.Context) ([]string, error) {
	c, err := p.dial(ctx)
	if err != nil {
		return nil, err
	}
	defer c.close()
	names, err := c.hms.GetPartitionNames(ctx, p.db, p.tbl, -1)
	if err != nil {
		return nil, p.errorf("listing partitions: %w", err)
	}
	sort.Strings(names)
	return names, nil
}

func (p *Policy) sd(location string) *hive_metastore.StorageDescriptor {
	cols := make([]*hive_metastore.FieldSchema, len(p.cols))
	for i, c := range p.cols {
		cols[i] = &hive_metastore.FieldSchema{Name: c.Name, Type: c.Type}
	}
	return &hive_metastore.StorageDescriptor{Cols: cols, Location: location, NumBuckets: -1,
		InputFormat: p.storage.inputFormat, OutputFormat: p.storage.outputFormat,
		SerdeInfo:  &hive_metastore.SerDeInfo{SerializationLib: p.storage.serde, Parameters: map[string]string{"serialization.format": "1"}},
		BucketCols: []string{}, SortCols: []*hive_metastore.Order{}, Parameters: map[string]string{}}
}

// ensureTable creates the database and the table if absent, as EXTERNAL
// (Hive 4 turns a managed table a client creates into a transactional
// one, whose files are Hive's), or checks the table that exists.
func (p *Policy) ensureTable(ctx context.Context, c *conn, keys []string) error {
	cat := "hive"
	r, err := c.hms.GetTableReq(ctx, &hive_metastore.GetTableRequest{DbName: p.db, TblName: p.tbl, CatName: &cat})
	var missing *hive_metastore.NoSuchObjectException
	switch {
	case err == nil:
		return p.check(r.GetTable(), keys)
	case !errors.As(err, &missing):
		return p.errorf("reading the table: %w", err)
	}
	if _, err := c.hms.GetDatabase(ctx, p.db); err != nil {
		if !errors.As(err, &missing) {
			return p.errorf("reading the database: %w", err)
		}
		err := c.hms.CreateDatabase(ctx, &hive_metastore.Database{Name: p.db, LocationUri: p.dbLocation(), OwnerName: strPtr("kord"), OwnerType: ownerType()})
		var exists *hive_metastore.AlreadyExistsException
		if err != nil && !errors.As(err, &exists) {
			return p.errorf("creating the database: %w", err)
		}
	}
	pk := make([]*hive_metastore.FieldSchema, len(keys))
	for i, k := range keys {
		pk[i] = &hive_metastore.FieldSchema{Name: k, Type: "string"}
	}
	t := &hive_metastore.Table{TableName: p.tbl, DbName: p.db, Owner: "kord", OwnerType: hive_metastore.PrincipalType_USER,
		CreateTime: int32(time.Now().Unix()), Sd: p.sd(p.location), PartitionKeys: pk,
		Parameters: map[string]string{"EXTERNAL": "TRUE"}, TableType: "EXTERNAL_TABLE"}
	err = c.hms.CreateTable(ctx, t)
	var exists *hive_metastore.AlreadyExistsException
	if errors.As(err, &exists) { // another process created it meanwhile
		return p.ensureTable(ctx, c, keys)
	}
	if err != nil {
		return p.errorf("creating the table: %w", err)
	}
	return nil
}

// check compares a table that exists with the policy's: its columns
// (names and types, in any order, as Hive reads Parquet by name), its
// partition keys (in order) and its type.
func (p *Policy) check(t *hive_metastore.Table, keys []string) error {
	var diffs []string
	if t.GetTableType() != "EXTERNAL_TABLE" {
		diffs = append(diffs, fmt.Sprintf("it is a %s, not an EXTERNAL_TABLE", t.GetTableType()))
	}
	have := map[string]string{}
	for _, c := range t.GetSd().GetCols() {
		have[strings.ToLower(c.GetName())] = strings.ToLower(c.GetType())
	}
	for _, c := range p.cols {
		switch ty, ok := have[c.Name]; {
		case !ok:
			diffs = append(diffs, fmt.Sprintf("column %s (%s) is missing", c.Name, c.Type))
		case ty != c.Type:
			diffs = append(diffs, fmt.Sprintf("column %s is %s, the records' is %s", c.Name, ty, c.Type))
		}
		delete(have, c.Name)
	}
	for n, ty := range have {
		diffs = append(diffs, fmt.Sprintf("column %s (%s) is not in the records", n, ty))
	}
	var pk []string
	for _, k := range t.GetPartitionKeys() {
		pk = append(pk, strings.ToLower(k.GetName()))
	}
	if strings.Join(pk, "/") != strings.Join(keys, "/") {
		diffs = append(diffs, fmt.Sprintf("its partition keys are %v, the sink's %v", pk, keys))
	}
	if len(diffs) > 0 {
		sort.Strings(diffs)
		return keyed.Permanent(p.errorf("the table exists and differs: %s", strings.Join(diffs, "; ")))
	}
	return nil
}

// conn is one connection to the Metastore.
type conn struct {
	sock *thrift.TSocket
	hms  *hive_metastore.ThriftHiveMetastoreClient
	stop func() bool
}

// dial connects to the Metastore, with the policy's timeout bounded by
// ctx's deadline; ctx's end closes the socket, which ends a call waiting
// on it.
func (p *Policy) dial(ctx context.Context) (*conn, error) {
	timeout := p.timeout
	if d, ok := ctx.Deadline(); ok {
		timeout = min(timeout, max(time.Until(d), time.Millisecond))
	}
	cfg := &thrift.TConfiguration{ConnectTimeout: timeout, SocketTimeout: timeout}
	sock := thrift.NewTSocketConf(p.addr, cfg)
	if err := sock.Open(); err != nil {
		return nil, p.errorf("connecting: %w", err)
	}
	tr := thrift.NewTBufferedTransport(sock, 4096)
	pf := thrift.NewTBinaryProtocolFactoryConf(cfg)
	c := &conn{sock: sock, hms: hive_metastore.NewThriftHiveMetastoreClient(thrift.NewTStandardClient(pf.GetProtocol(tr), pf.GetProtocol(tr)))}
	c.stop = context.AfterFunc(ctx, func() { sock.Close() })
	return c, nil
}

func (c *conn) close() {
	c.stop()
	c.sock.Close()
}

// dbLocation is where a database the policy creates lives: the parent of
// the table's location.
func (p *Policy) dbLocation() string {
	if i := strings.LastIndexByte(p.location, '/'); i > 0 && !strings.HasSuffix(p.location[:i], "/") {
		return p.location[:i]
	}
	return p.location
}

func strPtr(s string) *string { return &s }

func ownerType() *hive_metastore.PrincipalType {
	t := hive_metastore.PrincipalType_USER
	return &t
}

// columnsOf derives the table's columns from a struct type.
func columnsOf(t reflect.Type) ([]Column, error) {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if t.Kind() != reflect.Struct {
		return nil, fmt.Errorf("records of %v are not a struct: give the table's Columns", t)
	}
	var cols []Column
	for i := range t.NumField() {
		f := t.Field(i)
		if !f.IsExported() {
			continue
		}
		name := tagName(f.Tag.Get("parquet"))
		if name == "" {
			name = tagName(f.Tag.Get("json"))
		}
		if name == "-" {
			continue
		}
		if name == "" {
			name = f.Name
		}
		ty, err := hiveType(f.Type)
		if err != nil {
			return nil, fmt.Errorf("field %s: %w: give the table's Columns", f.Name, err)
		}
		cols = append(cols, Column{Name: strings.ToLower(name), Type: ty})
	}
	return cols, nil
}

func tagName(tag string) string {
	name, _, _ := strings.Cut(tag, ",")
	return name
}

var timeType = reflect.TypeFor[time.Time]()

func hiveType(t reflect.Type) (string, error) {
	if t == timeType {
		return "timestamp", nil
	}
	switch t.Kind() {
	case reflect.String:
		return "string", nil
	case reflect.Int64, reflect.Int, reflect.Uint32, reflect.Uint64, reflect.Uint:
		return "bigint", nil
	case reflect.Int32, reflect.Uint16:
		return "int", nil
	case reflect.Int16, reflect.Uint8:
		return "smallint", nil
	case reflect.Int8:
		return "tinyint", nil
	case reflect.Float64:
		return "double", nil
	case reflect.Float32:
		return "float", nil
	case reflect.Bool:
		return "boolean", nil
	case reflect.Slice:
		if t.Elem().Kind() == reflect.Uint8 {
			return "binary", nil
		}
	}
	return "", fmt.Errorf("no Hive type for %v", t)
}
