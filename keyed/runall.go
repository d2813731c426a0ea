package keyed

import (
	"context"
	"errors"
	"fmt"
	"sync"
)

// RunAll runs jobs together, as one program runs the stages of a job keyed
// by a field on several processes (kafkaio.NewRepartition): each as Run
// does, until ctx is done (each then stops with a final checkpoint) or its
// input ends. When one job fails, RunAll stops the others the same way, so
// that a process never runs half a job. It returns when every job has, with
// their errors joined, each naming its job.
func RunAll(ctx context.Context, jobs ...*Job) error {
	if len(jobs) == 0 {
		return errors.New("keyed: RunAll: no job")
	}
	ctx, stop := context.WithCancel(ctx)
	defer stop()
	errs := make([]error, len(jobs))
	var wg sync.WaitGroup
	for i, j := range jobs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := j.Run(ctx); err != nil {
				errs[i] = fmt.Errorf("job %s: %w", j.name, err)
				stop()
			}
		}()
	}
	wg.Wait()
	return errors.Join(errs...)
}
