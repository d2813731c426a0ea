package filesink

import (
	"errors"
	"sync/atomic"
)

// ErrCrashed is what a bucket target that crashed answers.
var ErrCrashed = errors.New("filesink test: crashed")

// CrashBucketAt makes the bucket target t fail its n-th request from now
// and every later one, as a dead process makes none; crashed reports
// whether it came. A PUT that fails leaves no object.
func CrashBucketAt(t Target, n int64) (crashed func() bool) {
	bt := t.(*bucketTarget)
	var count atomic.Int64
	bt.inject = func(string, string) error {
		if count.Add(1) >= n {
			return ErrCrashed
		}
		return nil
	}
	return func() bool { return count.Load() >= n }
}

// PartitionOf is v's partition path under s's PartitionBy, at event time
// ts.
func PartitionOf[T any](s *Sink[T], v T, ts int64) (string, error) {
	if s.partErr != nil {
		return "", s.partErr
	}
	p, _, _, err := s.part.of(v, ts)
	return p, err
}
