package kafkaio

import (
	"fmt"
	"log/slog"
	"sync/atomic"

	"github.com/kordproject/kord/consumer"
	"github.com/kordproject/kord/keyed"
	"github.com/kordproject/kord/partitioner"
)

// placementCheck is CheckPlacement's: the rule a source's input is
// expected to be placed by, and what is done with a record that is not.
type placementCheck struct {
	rule      partitioner.Rule
	fail      bool
	misplaced atomic.Int64
}

// check checks rec, read from a topic of parts partitions: a misplaced
// record fails the job with fail, and is logged and counted otherwise.
func (c *placementCheck) check(log *slog.Logger, parts int, rec *consumer.Record) error {
	if parts <= 0 || !c.rule.Keyed(rec.Key) {
		return nil
	}
	want := c.rule.Partition(rec.Key, parts)
	if want == rec.Partition {
		return nil
	}
	msg := fmt.Sprintf("%s[%d] offset %d: key %q is in partition %d, where the %s rule places it in partition %d of %d: the topic was written by another partitioner",
		rec.Topic, rec.Partition, rec.Offset, rec.Key, rec.Partition, c.rule.Name(), want, parts)
	if c.fail {
		return keyed.Permanent(fmt.Errorf("kafkaio: %s (kafkaio.CheckPlacement; partitioner.RuleNamed lists the rules kord knows)", msg))
	}
	if n := c.misplaced.Add(1); n <= 10 || n%1000 == 0 {
		log.Warn("kafkaio: source: a record placed by another rule", "record", msg, "misplaced_so_far", n)
	}
	return nil
}
