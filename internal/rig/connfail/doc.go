// Package connfail holds the table test that every path of kord that
// reaches for a Kafka cluster fails within its bound and says why, through
// the one classification of internal/kafkaconf (Conn.Do, Conn.Classify):
// the admin client, the consumer and its admin requests, the producer,
// kafkaio's source and sink in a job, kordtest's helpers and the main
// example, each against the real broker's listeners of scripts/kafka.sh
// (a wrong SCRAM password, an expired and a wrong-host server certificate),
// an unreachable port and a missing topic. It has no code: the test is the
// package, as with internal/layers.
package connfail
