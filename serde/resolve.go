package serde

import (
	"bytes"
	"encoding/json"
	"fmt"
	"maps"
	"math"
	"slices"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/linkedin/goavro/v2"
)

// Resolver is a Serde that reads values written under another schema of
// its format, by that format's rules: the Avro serdes are Resolvers, and
// read by Avro's schema resolution. Keyed state records a Resolver's
// WriterSchema in every snapshot, and a restore that finds the
// checkpoint's fingerprint differs from this code's reads the checkpoint's
// values with Resolve instead of refusing them.
type Resolver[T any] interface {
	Serde[T]
	// WriterSchema returns the schema Encode writes under, in the form
	// Resolve takes back. For Avro it is the schema's JSON as given (made
	// compact), not its Parsing Canonical Form, which drops the defaults,
	// aliases and logical types that resolution needs.
	WriterSchema() string
	// Resolve decides, from the two schemas alone, whether values written
	// under writer (another WriterSchema) can be read as this Serde's,
	// before any value is read. If they can, it returns the fingerprint
	// that writer's values carry (the Fingerprint of a Serde writing under
	// writer) and their decoder, which reads them as this Serde's Decode
	// reads its own; if not, a *ResolveError saying where and why.
	Resolve(writer string) (fingerprint string, decode func([]byte) (T, error), err error)
}

// ResolveError says why values written under one schema cannot be read
// under another.
type ResolveError struct {
	// Path is the field where the schemas do not agree, from the value
	// down: "age", "address.city", "items[].price" (an array's element),
	// "prices{}" (a map's value); "" for the value itself.
	Path string
	// Reason says what does not agree: "int cannot be read as string".
	Reason string
}

func (e *ResolveError) Error() string {
	if e.Path == "" {
		return "serde: schema resolution: " + e.Reason
	}
	return fmt.Sprintf("serde: schema resolution: field %q: %s", e.Path, e.Reason)
}

// This file implements the Avro specification's "Schema Resolution"
// section (apache/avro, doc/content/en/docs/++version++/Specification,
// "Schema Resolution"; the quotes below are from it): the writer's schema
// is the one the bytes were written under, the reader's the one the code
// expects. goavro decodes only under the writer's schema, so resolution
// happens on goavro's native values: the bytes are decoded under the
// writer's schema, and the native value is converted to the shape the
// reader's schema gives it, which the reader's codec then takes as its
// own. Every decision is taken once, from the two schemas, when the
// converter is built: a pair of schemas the rules refuse anywhere (a
// union branch no value may ever have taken included) is refused before a
// value is read.

// avroSchema is one node of a parsed Avro schema.
type avroSchema struct {
	kind    string // a primitive type's name, or "record", "enum", "fixed", "array", "map", "union"
	logical string // logicalType, if any
	name    string // a named type's full name
	aliases []string
	// record
	fields []avroField
	// enum
	symbols    []string
	enumDef    string
	hasEnumDef bool
	// fixed
	size int
	// decimal
	precision, scale int64
	// array items, map values
	elem *avroSchema
	// union
	branches []*avroSchema
}

type avroField struct {
	name    string
	aliases []string
	t       *avroSchema
	def     any // JSON, numbers as json.Number
	hasDef  bool
}

var avroPrimitives = map[string]bool{"null": true, "boolean": true, "int": true, "long": true, "float": true, "double": true, "bytes": true, "string": true}

// parseAvroSchema parses schema text into nodes. It expects a schema
// goavro accepted, and checks only what it reads.
func parseAvroSchema(schema string) (*avroSchema, error) {
	dec := json.NewDecoder(strings.NewReader(schema))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return nil, err
	}
	return (&avroParser{names: map[string]*avroSchema{}}).parse(v, "")
}

type avroParser struct{ names map[string]*avroSchema }

// fullName applies the specification's "Names" rules: a name with a dot
// is full; otherwise it is in namespace ns ("" the null namespace).
func fullName(name, ns string) string {
	if strings.Contains(name, ".") || ns == "" {
		return name
	}
	return ns + "." + name
}

func (p *avroParser) parse(v any, ns string) (*avroSchema, error) {
	switch v := v.(type) {
	case string:
		if avroPrimitives[v] {
			return &avroSchema{kind: v}, nil
		}
		if t, ok := p.names[fullName(v, ns)]; ok {
			return t, nil
		}
		if t, ok := p.names[v]; ok {
			return t, nil
		}
		return nil, fmt.Errorf("unknown type %q", v)
	case []any:
		u := &avroSchema{kind: "union"}
		for _, b := range v {
			t, err := p.parse(b, ns)
			if err != nil {
				return nil, err
			}
			u.branches = append(u.branches, t)
		}
		return u, nil
	case map[string]any:
		typ, ok := v["type"].(string)
		if !ok {
			return p.parse(v["type"], ns)
		}
		t := &avroSchema{kind: typ}
		t.logical, _ = v["logicalType"].(string)
		if t.logical == "decimal" {
			t.precision = jsonInt(v["precision"])
			t.scale = jsonInt(v["scale"])
		}
		switch typ {
		case "record", "error", "enum", "fixed":
			if typ == "error" {
				t.kind = "record"
			}
			name, _ := v["name"].(string)
			if !strings.Contains(name, ".") {
				if n, ok := v["namespace"].(string); ok {
					ns = n
				}
			} else {
				ns = name[:strings.LastIndexByte(name, '.')]
			}
			t.name = fullName(name, ns)
			if as, ok := v["aliases"].([]any); ok {
				for _, a := range as {
					if s, ok := a.(string); ok {
						t.aliases = append(t.aliases, fullName(s, ns))
					}
				}
			}
			p.names[t.name] = t // before its fields: a record may refer to itself
		}
		switch t.kind {
		case "record":
			fs, _ := v["fields"].([]any)
			for _, f := range fs {
				fm, ok := f.(map[string]any)
				if !ok {
					return nil, fmt.Errorf("record %s: a field is not an object", t.name)
				}
				ft, err := p.parse(fm["type"], ns)
				if err != nil {
					return nil, err
				}
				field := avroField{t: ft}
				field.name, _ = fm["name"].(string)
				field.def, field.hasDef = fm["default"]
				if as, ok := fm["aliases"].([]any); ok {
					for _, a := range as {
						if s, ok := a.(string); ok {
							field.aliases = append(field.aliases, s)
						}
					}
				}
				t.fields = append(t.fields, field)
			}
		case "enum":
			ss, _ := v["symbols"].([]any)
			for _, s := range ss {
				sym, _ := s.(string)
				t.symbols = append(t.symbols, sym)
			}
			t.enumDef, t.hasEnumDef = v["default"].(string)
		case "fixed":
			t.size = int(jsonInt(v["size"]))
		case "array", "map":
			key := "items"
			if typ == "map" {
				key = "values"
			}
			e, err := p.parse(v[key], ns)
			if err != nil {
				return nil, err
			}
			t.elem = e
		default:
			if !avroPrimitives[typ] { // {"type": "SomeNamedType"}
				return p.parse(typ, ns)
			}
		}
		return t, nil
	}
	return nil, fmt.Errorf("a schema is a string, an array or an object, not %T", v)
}

func jsonInt(v any) int64 {
	if n, ok := v.(json.Number); ok {
		i, _ := n.Int64()
		return i
	}
	return 0
}

// unqualified is a full name's last part: the specification matches
// records, enums and fixed by their "(unqualified) names".
func unqualified(name string) string { return name[strings.LastIndexByte(name, '.')+1:] }

// goavroLogical are the logical types goavro gives a name of their own
// ("long.timestamp-millis"), which is their key in a union's native form.
var goavroLogical = map[string]bool{
	"long.timestamp-millis": true, "long.timestamp-micros": true, "int.time-millis": true,
	"long.time-micros": true, "int.date": true, "bytes.decimal": true,
}

// unionName is t's key in goavro's native form of a union holding it
// ({"long": 5}, {"kord.Event": {...}}).
func (t *avroSchema) unionName() string {
	switch t.kind {
	case "record", "enum", "fixed":
		return t.name
	case "array", "map":
		return t.kind
	}
	if goavroLogical[t.kind+"."+t.logical] {
		return t.kind + "." + t.logical
	}
	return t.kind
}

// describe names t in a ResolveError: "int", "long (timestamp-millis)",
// "record kord.Event".
func (t *avroSchema) describe() string {
	s := t.kind
	switch t.kind {
	case "record", "enum", "fixed":
		s += " " + t.name
	case "array":
		s = "array of " + t.elem.describe()
	case "map":
		s = "map of " + t.elem.describe()
	case "union":
		var b []string
		for _, br := range t.branches {
			b = append(b, br.describe())
		}
		s = "union [" + strings.Join(b, ", ") + "]"
	}
	if t.logical != "" {
		s += " (" + t.logical + ")"
	}
	return s
}

// signature renders t with everything that shapes its native values, so
// that two schemas of equal signature have the same native values and
// need no conversion.
func (t *avroSchema) signature(b *strings.Builder, seen map[*avroSchema]bool) {
	fmt.Fprintf(b, "%s/%s/%d/%d", t.kind, t.logical, t.precision, t.scale)
	switch t.kind {
	case "record", "enum", "fixed":
		b.WriteString("/" + t.name)
		if seen[t] {
			return
		}
		seen[t] = true
	}
	switch t.kind {
	case "record":
		for _, f := range t.fields {
			b.WriteString("{" + f.name + ":")
			f.t.signature(b, seen)
			b.WriteString("}")
		}
	case "enum":
		b.WriteString(strings.Join(t.symbols, ","))
	case "fixed":
		fmt.Fprintf(b, "/%d", t.size)
	case "array", "map":
		b.WriteString("<")
		t.elem.signature(b, seen)
		b.WriteString(">")
	case "union":
		for _, br := range t.branches {
			b.WriteString("|")
			br.signature(b, seen)
		}
	}
}

func sameShape(w, r *avroSchema) bool {
	var a, b strings.Builder
	w.signature(&a, map[*avroSchema]bool{})
	r.signature(&b, map[*avroSchema]bool{})
	return a.String() == b.String()
}

// promotable reports whether the specification lets the writer's
// primitive type w be read as the reader's r: "int is promotable to long,
// float, or double; long is promotable to float or double; float is
// promotable to double; string is promotable to bytes; bytes is promotable
// to string".
func promotable(w, r string) bool {
	switch w {
	case "int":
		return r == "long" || r == "float" || r == "double"
	case "long":
		return r == "float" || r == "double"
	case "float":
		return r == "double"
	case "string":
		return r == "bytes"
	case "bytes":
		return r == "string"
	}
	return false
}

// matches is the specification's "match" of two schemas, which picks the
// branch of a union and says whether two schemas may be resolved at all:
// arrays whose items match, maps whose values match, enums whose
// unqualified names match, fixed whose sizes and unqualified names match,
// records of the same unqualified name, either schema a union, the same
// primitive type, or a promotion. A named reader type also matches a
// writer's type named as one of its aliases ("Aliases").
func matches(w, r *avroSchema) bool {
	if w.kind == "union" || r.kind == "union" {
		return true
	}
	switch {
	case w.kind == r.kind:
		switch w.kind {
		case "array", "map":
			return matches(w.elem, r.elem)
		case "record", "enum":
			return namesMatch(w, r)
		case "fixed":
			return w.size == r.size && namesMatch(w, r)
		}
		return true
	case avroPrimitives[w.kind] && avroPrimitives[r.kind]:
		return promotable(w.kind, r.kind)
	}
	return false
}

func namesMatch(w, r *avroSchema) bool {
	wn := unqualified(w.name)
	if unqualified(r.name) == wn {
		return true
	}
	for _, a := range r.aliases {
		if unqualified(a) == wn {
			return true
		}
	}
	return false
}

// convert turns a native value of the writer's schema into one of the
// reader's. A nil convert is the identity.
type convert func(v any) (any, error)

func apply(c convert, v any) (any, error) {
	if c == nil {
		return v, nil
	}
	return c(v)
}

type avroResolver struct {
	// Conversions being built or built, by (writer, reader) node: a
	// recursive record's conversion refers to itself through its entry.
	memo map[[2]*avroSchema]*convert
}

func joinPath(path, field string) string {
	if path == "" {
		return field
	}
	return path + "." + field
}

func refuse(path, format string, args ...any) error {
	return &ResolveError{Path: path, Reason: fmt.Sprintf(format, args...)}
}

// resolve builds the conversion of values of w into values of r, at path.
func (rs *avroResolver) resolve(w, r *avroSchema, path string) (convert, error) {
	if sameShape(w, r) {
		return nil, nil
	}
	key := [2]*avroSchema{w, r}
	if c, ok := rs.memo[key]; ok {
		return func(v any) (any, error) { return apply(*c, v) }, nil
	}
	slot := new(convert)
	rs.memo[key] = slot
	c, err := rs.build(w, r, path)
	if err != nil {
		return nil, err
	}
	*slot = c
	if c == nil {
		*slot = func(v any) (any, error) { return v, nil }
	}
	return c, nil
}

func (rs *avroResolver) build(w, r *avroSchema, path string) (convert, error) {
	switch {
	case w.kind == "union":
		// "if both are unions: The first schema in the reader's union that
		// matches the selected writer's union schema is recursively
		// resolved against it. if none match, an error is signalled"; "if
		// writer's is a union, but reader's is not: If the reader's schema
		// matches the selected writer's schema, it is recursively resolved
		// against it. If they do not match, an error is signalled". Every
		// branch of the writer's union is resolved now, not when a value
		// selects it.
		byName := make(map[string]convert, len(w.branches))
		for _, wb := range w.branches {
			c, err := rs.resolve(wb, r, path)
			if err != nil {
				return nil, err
			}
			if c == nil {
				c = func(v any) (any, error) { return v, nil }
			}
			byName[wb.unionName()] = c
		}
		return func(v any) (any, error) {
			name := "null"
			if v != nil {
				m, ok := v.(map[string]any)
				if !ok || len(m) != 1 {
					return nil, fmt.Errorf("a union's value is %T, not a map of one entry", v)
				}
				for name, v = range m {
				}
			}
			c, ok := byName[name]
			if !ok {
				return nil, fmt.Errorf("a union's value is a %s, which the union does not have", name)
			}
			return c(v)
		}, nil
	case r.kind == "union":
		// "if reader's is a union, but writer's is not: The first schema in
		// the reader's union that matches the writer's schema is
		// recursively resolved against it. If none match, an error is
		// signalled."
		for _, rb := range r.branches {
			if !matches(w, rb) {
				continue
			}
			c, err := rs.resolve(w, rb, path)
			if err != nil {
				return nil, err
			}
			if rb.kind == "null" {
				return func(any) (any, error) { return nil, nil }, nil
			}
			name := rb.unionName()
			return func(v any) (any, error) {
				v, err := apply(c, v)
				if err != nil {
					return nil, err
				}
				return map[string]any{name: v}, nil
			}, nil
		}
		return nil, refuse(path, "%s cannot be read as any branch of %s", w.describe(), r.describe())
	case w.kind == r.kind && (w.kind == "array" || w.kind == "map"):
		// Their elements are resolved below, so that a refusal names
		// the element's field.
	case !matches(w, r):
		return nil, refuse(path, "%s cannot be read as %s", w.describe(), r.describe())
	}
	// Logical types keep goavro's native form of them (time.Time for a
	// timestamp, *big.Rat for a decimal), which changes with the logical
	// type: a change of logical type is refused rather than converted.
	if w.logical != r.logical || w.precision != r.precision || w.scale != r.scale {
		return nil, refuse(path, "%s cannot be read as %s (a change of logical type)", w.describe(), r.describe())
	}
	switch r.kind {
	case "record":
		return rs.record(w, r, path)
	case "enum":
		// "if both are enums: if the writer's symbol is not present in the
		// reader's enum and the reader has a default value, then that
		// value is used, otherwise an error is signalled." Every symbol of
		// the writer's is checked now.
		to := make(map[string]string, len(w.symbols))
		for _, s := range w.symbols {
			switch {
			case slices.Contains(r.symbols, s):
				to[s] = s
			case r.hasEnumDef:
				to[s] = r.enumDef
			default:
				return nil, refuse(path, "symbol %q of enum %s is not in this code's enum %s, which has no default", s, w.name, r.name)
			}
		}
		return func(v any) (any, error) {
			s, ok := v.(string)
			if !ok {
				return nil, fmt.Errorf("an enum's value is %T, not a string", v)
			}
			if t, ok := to[s]; ok {
				return t, nil
			}
			return nil, fmt.Errorf("enum symbol %q is not in the writer's schema", s)
		}, nil
	case "array":
		// "if both are arrays: This resolution algorithm is applied
		// recursively to the reader's and writer's array item schemas."
		c, err := rs.resolve(w.elem, r.elem, path+"[]")
		if err != nil || c == nil {
			return nil, err
		}
		return func(v any) (any, error) {
			in, ok := v.([]any)
			if !ok {
				return nil, fmt.Errorf("an array's value is %T", v)
			}
			out := make([]any, len(in))
			for i, e := range in {
				if out[i], err = c(e); err != nil {
					return nil, err
				}
			}
			return out, nil
		}, nil
	case "map":
		// "if both are maps: This resolution algorithm is applied
		// recursively to the reader's and writer's value schemas."
		c, err := rs.resolve(w.elem, r.elem, path+"{}")
		if err != nil || c == nil {
			return nil, err
		}
		return func(v any) (any, error) {
			in, ok := v.(map[string]any)
			if !ok {
				return nil, fmt.Errorf("a map's value is %T", v)
			}
			out := make(map[string]any, len(in))
			for k, e := range in {
				if out[k], err = c(e); err != nil {
					return nil, err
				}
			}
			return out, nil
		}, nil
	case "fixed":
		return nil, nil
	}
	if w.kind == r.kind {
		return nil, nil
	}
	return promotion(w.kind, r.kind), nil
}

// promotion converts goavro's native value of primitive type w to r's
// (matches has checked that w is promotable to r).
func promotion(w, r string) convert {
	return func(v any) (any, error) {
		switch x := v.(type) {
		case int32:
			switch r {
			case "long":
				return int64(x), nil
			case "float":
				return float32(x), nil
			case "double":
				return float64(x), nil
			}
		case int64:
			switch r {
			case "float":
				return float32(x), nil
			case "double":
				return float64(x), nil
			}
		case float32:
			if r == "double" {
				return float64(x), nil
			}
		case string:
			if r == "bytes" {
				return []byte(x), nil
			}
		case []byte:
			if r == "string" {
				return string(x), nil
			}
		}
		return nil, fmt.Errorf("a %s's value is %T, which does not promote to %s", w, v, r)
	}
}

// record resolves two records: "the ordering of fields may be different:
// fields are matched by name"; "schemas for fields with the same name in
// both records are resolved recursively"; "if the writer's record contains
// a field with a name not present in the reader's record, the writer's
// value for that field is ignored"; "if the reader's record schema has a
// field that contains a default value, and writer's schema does not have a
// field with the same name, then the reader should use the default value
// from its field"; "if the reader's record schema has a field with no
// default value, and writer's schema does not have a field with the same
// name, an error is signalled". A reader's field also takes the writer's
// field named as one of its aliases ("Aliases").
func (rs *avroResolver) record(w, r *avroSchema, path string) (convert, error) {
	type fieldConv struct {
		name, from string // from: the writer's field; "" for the default
		c          convert
		def        any
	}
	var fcs []fieldConv
	for _, rf := range r.fields {
		fpath := joinPath(path, rf.name)
		var wf *avroField
		for i := range w.fields {
			if w.fields[i].name == rf.name || slices.Contains(rf.aliases, w.fields[i].name) {
				wf = &w.fields[i]
				break
			}
		}
		if wf == nil {
			if !rf.hasDef {
				return nil, refuse(fpath, "the checkpoint's record %s has no field %q, and this code's %s gives it no default", w.name, rf.name, r.name)
			}
			def, err := avroDefault(rf.t, rf.def)
			if err != nil {
				return nil, refuse(fpath, "its default: %v", err)
			}
			fcs = append(fcs, fieldConv{name: rf.name, def: def})
			continue
		}
		c, err := rs.resolve(wf.t, rf.t, fpath)
		if err != nil {
			return nil, err
		}
		fcs = append(fcs, fieldConv{name: rf.name, from: wf.name, c: c})
	}
	return func(v any) (any, error) {
		in, ok := v.(map[string]any)
		if !ok {
			return nil, fmt.Errorf("a record's value is %T", v)
		}
		out := make(map[string]any, len(fcs))
		for _, f := range fcs {
			if f.from == "" {
				out[f.name] = cloneNative(f.def)
				continue
			}
			x, err := apply(f.c, in[f.from])
			if err != nil {
				return nil, err
			}
			out[f.name] = x
		}
		return out, nil
	}, nil
}

// cloneNative copies the maps and slices of a native value, so that values
// given a default share none of its memory.
func cloneNative(v any) any {
	switch x := v.(type) {
	case map[string]any:
		m := maps.Clone(x)
		for k, e := range m {
			m[k] = cloneNative(e)
		}
		return m
	case []any:
		s := slices.Clone(x)
		for i, e := range s {
			s[i] = cloneNative(e)
		}
		return s
	case []byte:
		return slices.Clone(x)
	}
	return v
}

// avroDefault converts a field's default, in JSON, to goavro's native
// value of type t, as the specification's table of "field default
// values" has them: "Default values for union fields correspond to the
// first schema that matches in the union. Default values for bytes and
// fixed fields are JSON strings, where Unicode code points 0-255 are
// mapped to unsigned 8-bit byte values 0-255." A logical type's default is
// written as its underlying type's, and becomes goavro's native value of
// the logical type (a time.Time for a timestamp); a decimal's default is
// refused.
func avroDefault(t *avroSchema, v any) (any, error) {
	bad := func() error { return fmt.Errorf("%s is not a %s", jsonText(v), t.describe()) }
	switch t.kind {
	case "null":
		if v != nil {
			return nil, bad()
		}
		return nil, nil
	case "boolean":
		if b, ok := v.(bool); ok {
			return b, nil
		}
	case "int", "long":
		n, ok := v.(json.Number)
		if !ok {
			return nil, bad()
		}
		i, err := n.Int64()
		if err != nil {
			return nil, bad()
		}
		if t.kind == "int" && (i < math.MinInt32 || i > math.MaxInt32) {
			return nil, bad()
		}
		// goavro's native values of the logical types it knows, as its
		// codecs decode them.
		switch t.kind + "." + t.logical {
		case "long.timestamp-millis":
			return time.UnixMilli(i).UTC(), nil
		case "long.timestamp-micros":
			return time.UnixMicro(i).UTC(), nil
		case "int.time-millis":
			return time.Duration(i) * time.Millisecond, nil
		case "long.time-micros":
			return time.Duration(i) * time.Microsecond, nil
		case "int.date":
			return time.Date(1970, 1, 1, 0, 0, 0, 0, time.UTC).AddDate(0, 0, int(i)).UTC(), nil
		}
		if t.kind == "long" {
			return i, nil
		}
		return int32(i), nil
	case "float", "double":
		n, ok := v.(json.Number)
		if !ok {
			return nil, bad()
		}
		f, err := n.Float64()
		if err != nil {
			return nil, bad()
		}
		if t.kind == "float" {
			return float32(f), nil
		}
		return f, nil
	case "string":
		if s, ok := v.(string); ok {
			return s, nil
		}
	case "bytes", "fixed":
		s, ok := v.(string)
		if !ok || t.logical == "decimal" {
			return nil, bad()
		}
		b := make([]byte, 0, len(s))
		for _, r := range s {
			if r > 255 || r == utf8.RuneError {
				return nil, bad()
			}
			b = append(b, byte(r))
		}
		if t.kind == "fixed" && len(b) != t.size {
			return nil, bad()
		}
		return b, nil
	case "enum":
		if s, ok := v.(string); ok && slices.Contains(t.symbols, s) {
			return s, nil
		}
	case "array":
		a, ok := v.([]any)
		if !ok {
			return nil, bad()
		}
		out := make([]any, len(a))
		for i, e := range a {
			x, err := avroDefault(t.elem, e)
			if err != nil {
				return nil, err
			}
			out[i] = x
		}
		return out, nil
	case "map":
		m, ok := v.(map[string]any)
		if !ok {
			return nil, bad()
		}
		out := make(map[string]any, len(m))
		for k, e := range m {
			x, err := avroDefault(t.elem, e)
			if err != nil {
				return nil, err
			}
			out[k] = x
		}
		return out, nil
	case "record":
		m, ok := v.(map[string]any)
		if !ok {
			return nil, bad()
		}
		out := make(map[string]any, len(t.fields))
		for _, f := range t.fields {
			e, ok := m[f.name]
			if !ok {
				if !f.hasDef {
					return nil, fmt.Errorf("%s has no field %q, which has no default", jsonText(v), f.name)
				}
				e = f.def
			}
			x, err := avroDefault(f.t, e)
			if err != nil {
				return nil, err
			}
			out[f.name] = x
		}
		return out, nil
	case "union":
		for _, b := range t.branches {
			x, err := avroDefault(b, v)
			if err != nil {
				continue
			}
			if b.kind == "null" {
				return nil, nil
			}
			return map[string]any{b.unionName(): x}, nil
		}
	}
	return nil, bad()
}

func jsonText(v any) string {
	b, err := json.Marshal(v)
	if err != nil {
		return fmt.Sprint(v)
	}
	return string(b)
}

// avroResolution builds the conversion of values written under writer to
// values of reader (both schema texts), and the writer's codec.
func avroResolution(writer, reader string) (*goavro.Codec, convert, error) {
	wc, err := goavro.NewCodec(writer)
	if err != nil {
		return nil, nil, fmt.Errorf("serde: avro writer schema: %w", err)
	}
	w, err := parseAvroSchema(writer)
	if err != nil {
		return nil, nil, fmt.Errorf("serde: avro writer schema: %w", err)
	}
	r, err := parseAvroSchema(reader)
	if err != nil {
		return nil, nil, fmt.Errorf("serde: avro schema: %w", err)
	}
	rs := &avroResolver{memo: map[[2]*avroSchema]*convert{}}
	c, err := rs.resolve(w, r, "")
	if err != nil {
		return nil, nil, err
	}
	return wc, c, nil
}

// compactSchema is schema's JSON without its insignificant white space.
func compactSchema(schema string) string {
	var b bytes.Buffer
	if err := json.Compact(&b, []byte(schema)); err != nil {
		return schema
	}
	return b.String()
}
