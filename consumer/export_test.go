package consumer

import "github.com/confluentinc/confluent-kafka-go/v2/kafka"

// ReadsInBatches reports whether s reads its consumer's queue in batches
// (internal/rdkbatch) rather than one Consumer.Poll a record.
func ReadsInBatches(s *Source) bool { return s.rd != nil }

// ReadRecordByRecord puts s on the per-record path, as the kordnobatch
// tag builds it, so that one test binary can compare the two paths.
func ReadRecordByRecord(s *Source) {
	if s.rd != nil {
		s.rd.Close()
		s.rd = nil
	}
}

// AssignPast assigns topic's partition p from offset on the consumer
// itself, past Assign's check that the offset lies in the log, keeping
// s's positions (Assign's, made before): how a partition's log moving
// from under a reader looks to it.
func AssignPast(s *Source, topic string, p int32, offset int64) error {
	return s.c.Assign([]kafka.TopicPartition{{Topic: &topic, Partition: p, Offset: kafka.Offset(offset)}})
}
