package main

import (
	"fmt"
	"io/fs"
	"path/filepath"
	"strings"
	"time"

	"github.com/parquet-go/parquet-go"

	"github.com/kordproject/kord/filesink"
	"github.com/kordproject/kord/keyed/connector"
	"github.com/kordproject/kord/vfs"
)

// lakeExt is the extension of the lake's files: Parquet, zstd-compressed.
const lakeExt = ".parquet"

// lakeSink lands results in dir as Parquet, one directory per action,
// exactly once beside the Kafka sink: a file appears when its checkpoint
// committed; with compact, one file per action and interval.
func lakeSink(dir string, compact time.Duration) connector.Sink[Result] {
	opts := []filesink.Opt{filesink.BucketBy(func(r Result) string { return "action=" + r.Action })}
	if compact > 0 {
		opts = append(opts, filesink.CompactEvery(compact))
	}
	return filesink.New(filesink.Dir(vfs.Default(), dir), filesink.Parquet[Result](filesink.Zstd), opts...)
}

// readLake reads every published file of the lake (what a reader's glob
// "*/*.parquet" sees), each result with the file it is in.
func readLake(dir string, each func(r Result, file string)) error {
	return filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		name := d.Name()
		if d.IsDir() || strings.HasPrefix(name, ".") || !strings.HasSuffix(name, lakeExt) {
			return nil
		}
		rows, err := parquet.ReadFile[Result](p)
		if err != nil {
			return fmt.Errorf("%s: %w", p, err)
		}
		for _, r := range rows {
			each(r, p)
		}
		return nil
	})
}

// lakeCheck is what the lake holds against the Kafka output.
type lakeCheck struct {
	rows, files, dups, missing int
	wrong                      int // not in Kafka's output, another count, or in another action's directory
}

// checkLake compares the lake with the Kafka output (inKafka: each
// result's count by uuid/seq): every result once, with Kafka's count, in
// its action's directory.
func checkLake(o options, inKafka map[string]int64) (lakeCheck, error) {
	var c lakeCheck
	if o.lake == "" {
		return c, nil
	}
	seen := map[string]bool{}
	files := map[string]bool{}
	err := readLake(o.lake, func(r Result, file string) {
		c.rows++
		files[file] = true
		k := fmt.Sprintf("%s/%d", r.UUID, r.Seq)
		if seen[k] {
			c.dups++
			return
		}
		seen[k] = true
		if n, ok := inKafka[k]; !ok || n != r.Count || filepath.Base(filepath.Dir(file)) != "action="+r.Action {
			c.wrong++
		}
	})
	if err != nil {
		return c, fmt.Errorf("reading the lake %s: %w", o.lake, err)
	}
	c.files = len(files)
	for k := range inKafka {
		if !seen[k] {
			c.missing++
		}
	}
	return c, nil
}
