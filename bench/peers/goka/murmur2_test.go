package main

import (
	"testing"

	"github.com/IBM/sarama"
)

// The vectors are Kafka's own (UtilsTest.testMurmur2), as signed Java ints.
func TestMurmur2KafkaVectors(t *testing.T) {
	for key, want := range map[string]int32{
		"21":                         -973932308,
		"foobar":                     -790332482,
		"a-little-bit-long-string":   -985981536,
		"a-little-bit-longer-string": -1486304829,
		"lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8": -58897971,
		"abc": 479470107,
	} {
		if got := int32(murmur2Hash([]byte(key))); got != want {
			t.Errorf("murmur2(%q) = %d, want %d", key, got, want)
		}
	}
}

// Through sarama's hash partitioner, as goka uses it, a key lands where
// Java's default partitioner puts it: toPositive(murmur2(key)) % n.
func TestPartitionLikeJava(t *testing.T) {
	p := sarama.NewCustomHashPartitioner(newMurmur2)("t")
	for _, key := range []string{"21", "foobar", "1b4e28ba-2fa1-41d2-883f-0016d3cca427", "abc"} {
		got, err := p.Partition(&sarama.ProducerMessage{Key: sarama.StringEncoder(key)}, 12)
		if err != nil {
			t.Fatal(err)
		}
		if want := int32(murmur2Hash([]byte(key))&0x7fffffff) % 12; got != want {
			t.Errorf("%q: partition %d, want %d", key, got, want)
		}
	}
}
