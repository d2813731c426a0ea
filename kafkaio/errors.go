package kafkaio

import (
	"fmt"

	"github.com/kordproject/kord/producer"
)

// Errors name each layer once: "kafkaio: sink to topic \"counts\": ..."
// or "kafkaio: source of topic \"events\": ...", then what the client
// below said, under its own name (producer:, consumer:, admin:). The job
// above adds its own name and the part's ("keyed: job \"counts\": sink
// \"results\": ...").

// sinkErrorf is an error of the sink writing topic.
func sinkErrorf(topic, format string, args ...any) error {
	return fmt.Errorf("kafkaio: sink to topic %q: "+format, append([]any{topic}, args...)...)
}

// sourceErrorf is an error of the source reading topic.
func sourceErrorf(topic, format string, args ...any) error {
	return fmt.Errorf("kafkaio: source of topic %q: "+format, append([]any{topic}, args...)...)
}

// configError is a setting the sink refuses: its message is kafkaio's
// alone, and it is producer.ErrConfig (errors.Is), as a setting the
// producer refuses is.
type configError struct{ err error }

func (e *configError) Error() string        { return e.err.Error() }
func (e *configError) Unwrap() error        { return e.err }
func (e *configError) Is(target error) bool { return target == producer.ErrConfig }

// sinkConfigErrorf is a setting the sink writing topic refuses.
func sinkConfigErrorf(topic, format string, args ...any) error {
	return &configError{sinkErrorf(topic, format, args...)}
}
