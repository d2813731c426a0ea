package producer_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/kordproject/kord/producer"
	"github.com/kordproject/kord/serde"
)

// TestConfigAliases: librdkafka's aliases (request.required.acks for acks,
// metadata.broker.list for bootstrap.servers; rdkafka_conf.c, _RK_C_ALIAS)
// go through the same checks as the names kord uses, errors name the key
// the user wrote, and a name and its alias with different values are
// refused rather than left to librdkafka, which applies whichever it sees
// last. A queue bound in bytes below message.max.bytes is refused too.
func TestConfigAliases(t *testing.T) {
	set := func(kv ...string) []producer.Opt {
		var opts []producer.Opt
		for i := 0; i < len(kv); i += 2 {
			opts = append(opts, producer.Set(kv[i], kv[i+1]))
		}
		return opts
	}
	brokers := producer.Brokers("127.0.0.1:1")
	for _, tc := range []struct {
		name string
		opts []producer.Opt
		want error  // nil: New succeeds
		msg  string // the error names this
	}{
		{"alias refused", append(set("request.required.acks", "1"), brokers), producer.ErrReordering, "request.required.acks=1"},
		{"alias zero refused", append(set("request.required.acks", "0"), brokers), producer.ErrReordering, "request.required.acks=0"},
		{"alias all accepted", append(set("request.required.acks", "all"), brokers), nil, ""},
		{"alias -1 accepted", append(set("request.required.acks", "-1"), brokers), nil, ""},
		{"name and alias agree", append(set("acks", "all", "request.required.acks", "-1"), brokers), nil, ""},
		{"name and alias conflict", append(set("acks", "all", "request.required.acks", "1"), brokers), producer.ErrConfig, "request.required.acks=1"},
		{"conflict with opt-out", append(set("acks", "0", "request.required.acks", "1", "enable.idempotence", "false"), brokers, producer.AllowReordering()), producer.ErrConfig, "acks=0"},
		{"alias with opt-out", append(set("request.required.acks", "1", "enable.idempotence", "false"), brokers, producer.AllowReordering()), nil, ""},
		{"broker list alias", set("metadata.broker.list", "127.0.0.1:1"), nil, ""},
		{"broker list conflict", set("bootstrap.servers", "127.0.0.1:1", "metadata.broker.list", "127.0.0.1:2"), producer.ErrConfig, "metadata.broker.list=127.0.0.1:2"},
		// librdkafka takes a record larger than its queue's byte bound as
		// queue full however empty the queue is: refused, not waited on.
		{"queue below a record", append(set("queue.buffering.max.kbytes", "900"), brokers), producer.ErrConfig, "queue.buffering.max.kbytes=900 (921600 bytes) is below message.max.bytes=1000000"},
		{"queue below a larger record", append(set("queue.buffering.max.kbytes", "4096", "message.max.bytes", "5000000"), brokers), producer.ErrConfig, "at least 4883"},
		{"queue holds a record", append(set("queue.buffering.max.kbytes", "977"), brokers), nil, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p, err := producer.New(serde.Bytes(), serde.Bytes(), tc.opts...)
			if tc.want == nil {
				require.NoError(t, err)
				require.NoError(t, p.Close())
				return
			}
			require.ErrorIs(t, err, tc.want)
			require.Contains(t, err.Error(), tc.msg)
		})
	}
}
