package lifecycle

import (
	"math/rand/v2"
	"testing"
	"time"
)

// TestLifecycleProperties feeds the lifecycle thousands of random event
// sequences (valid and stale events, in any order) and checks, against a
// plain record of what it has emitted so far, the rules DESIGN.md states:
// one checkpoint in flight; ids increase by one; a checkpoint is committed
// only after every task acknowledged it, its metadata was written and its
// commit was requested; a commit is never followed by an abort of the same
// checkpoint; triggers respect the interval and the min pause; more than
// TolerableFailures aborts in a row fail the job; Stopped comes only after
// Stop and the final checkpoint's commit.
func TestLifecycleProperties(t *testing.T) {
	seeds := 3000
	if testing.Short() {
		seeds = 300
	}
	seen := map[Kind]int{}
	defer func() {
		for k := Trigger; k <= Stopped; k++ {
			if seen[k] == 0 {
				t.Errorf("the random sequences never produced %v", k)
			}
		}
	}()
	for seed := uint64(0); seed < uint64(seeds); seed++ {
		r := rand.New(rand.NewPCG(seed, 17))
		cfg := Config{
			Interval:          time.Duration(1+r.IntN(5)) * 100 * time.Millisecond,
			Timeout:           time.Duration(1+r.IntN(10)) * 100 * time.Millisecond,
			MinPause:          time.Duration(r.IntN(4)) * 100 * time.Millisecond,
			TolerableFailures: r.IntN(3),
		}
		tasks := 1 + r.IntN(4)
		start := uint64(r.IntN(5))
		now := time.Unix(0, 0)
		l, err := New(cfg, tasks, start, now)
		if err != nil {
			t.Fatal(err)
		}
		// What the model knows, from effects only.
		type ck struct {
			acks                       map[int]bool
			meta, commit, ended, final bool
			triggered                  time.Time
		}
		cks := map[uint64]*ck{}
		var inflight uint64
		lastID, committed := start, start
		lastTrig, lastEnd := now, now
		aborts, stopped, done := 0, false, false
		check := func(effs []Effect, what string) {
			for _, e := range effs {
				seen[e.Kind]++
				if done {
					t.Fatalf("seed %d: %s: effect %v after the lifecycle ended", seed, what, e)
				}
				c := cks[e.ID]
				switch e.Kind {
				case Trigger:
					if inflight != 0 {
						t.Fatalf("seed %d: trigger %d while %d in flight", seed, e.ID, inflight)
					}
					if e.ID != lastID+1 {
						t.Fatalf("seed %d: trigger %d after %d", seed, e.ID, lastID)
					}
					if !e.Final && (now.Sub(lastTrig) < cfg.Interval || now.Sub(lastEnd) < cfg.MinPause) {
						t.Fatalf("seed %d: trigger %d too early", seed, e.ID)
					}
					if e.Final && !stopped {
						t.Fatalf("seed %d: final trigger without Stop", seed)
					}
					lastID, inflight, lastTrig = e.ID, e.ID, now
					cks[e.ID] = &ck{acks: map[int]bool{}, triggered: now, final: e.Final}
				case WriteMetadata:
					if c == nil || len(c.acks) != tasks || c.meta {
						t.Fatalf("seed %d: write-metadata %d before every ack", seed, e.ID)
					}
					c.meta = true
				case Commit:
					if c == nil || !c.meta || c.commit {
						t.Fatalf("seed %d: commit %d before its metadata", seed, e.ID)
					}
					c.commit = true
				case Committed:
					if c == nil || !c.commit || c.ended || e.ID <= committed {
						t.Fatalf("seed %d: committed %d without a commit", seed, e.ID)
					}
					c.ended, committed, inflight, lastEnd, aborts = true, e.ID, 0, now, 0
				case Abort:
					if c == nil || c.commit || c.ended {
						t.Fatalf("seed %d: abort %d after its commit was requested", seed, e.ID)
					}
					c.ended, inflight, lastEnd = true, 0, now
					aborts++
				case Fail:
					if aborts <= cfg.TolerableFailures {
						t.Fatalf("seed %d: fail after %d aborts, tolerable %d", seed, aborts, cfg.TolerableFailures)
					}
					done = true
				case Recover:
					if c == nil || !c.commit {
						t.Fatalf("seed %d: recover %d without a commit", seed, e.ID)
					}
					inflight, done = 0, true
				case Stopped:
					if !stopped || c == nil || !c.final || !c.ended {
						t.Fatalf("seed %d: stopped without the final checkpoint's commit", seed)
					}
					done = true
				}
			}
		}
		for step := 0; step < 200 && !done; step++ {
			now = now.Add(time.Duration(r.IntN(150)) * time.Millisecond)
			id := lastID
			if r.IntN(5) == 0 && id > 0 {
				id-- // stale
			}
			switch k := r.IntN(20); {
			case k < 6:
				check(l.Tick(now), "tick")
			case k < 11:
				task := r.IntN(tasks + 1) // sometimes out of range
				effs := l.Ack(id, task)
				if c := cks[id]; c != nil && task < tasks && id == inflight && !c.meta {
					c.acks[task] = true
				}
				check(effs, "ack")
			case k < 12:
				check(l.TaskFailed(id, now), "task-failed")
			case k < 15:
				check(l.MetadataDurable(id), "meta-durable")
			case k < 16:
				check(l.MetadataFailed(id, now), "meta-failed")
			case k < 19:
				if r.IntN(10) == 0 {
					check(l.CommitFailed(id), "commit-failed")
				} else {
					check(l.CommitDone(id, now), "commit-done")
				}
			default:
				if r.IntN(4) == 0 {
					stopped = true
					check(l.Stop(now), "stop")
				}
			}
			if got, ok := l.InFlight(); ok != (inflight != 0) || (ok && got != inflight) {
				t.Fatalf("seed %d: InFlight() = %d,%v, model %d", seed, got, ok, inflight)
			}
			if l.Committed() != committed {
				t.Fatalf("seed %d: Committed() = %d, model %d", seed, l.Committed(), committed)
			}
		}
	}
}
