package kafkaconf

/*
#include <stdlib.h>
// librdkafka's configuration API (rdkafka.h), declared here rather than
// included: the library itself is linked by confluent-kafka-go (bundled, or
// the system's with -tags dynamic), which this package imports.
typedef struct rd_kafka_conf_s rd_kafka_conf_t;
rd_kafka_conf_t *rd_kafka_conf_new(void);
void rd_kafka_conf_destroy(rd_kafka_conf_t *conf);
int rd_kafka_conf_get(const rd_kafka_conf_t *conf, const char *name, char *dest, size_t *dest_size);
int rd_kafka_conf_set(rd_kafka_conf_t *conf, const char *name, const char *value, char *errstr, size_t errstr_size);
*/
import "C"

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"unsafe"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"
)

// Features returns librdkafka's builtin.features: what the librdkafka
// linked into this program was built with (gzip, ssl, sasl_scram,
// sasl_gssapi, ...).
func Features() []string {
	conf := C.rd_kafka_conf_new()
	defer C.rd_kafka_conf_destroy(conf)
	name := C.CString("builtin.features")
	defer C.free(unsafe.Pointer(name))
	var size C.size_t
	if C.rd_kafka_conf_get(conf, name, nil, &size) != 0 || size == 0 {
		return nil
	}
	buf := make([]byte, size)
	if C.rd_kafka_conf_get(conf, name, (*C.char)(unsafe.Pointer(&buf[0])), &size) != 0 {
		return nil
	}
	return strings.Split(strings.TrimRight(string(buf), "\x00"), ",")
}

// librdkafka's rd_kafka_conf_res_t.
const (
	confUnknown = -2
	confInvalid = -1
)

// errUnknown is a name librdkafka does not know.
var errUnknown = errors.New("librdkafka has no such setting")

// check asks librdkafka whether it accepts name=value, on a configuration
// of its own that is then thrown away. Errors never quote a secret value.
func check(name, value string) error {
	conf := C.rd_kafka_conf_new()
	defer C.rd_kafka_conf_destroy(conf)
	cn, cv := C.CString(name), C.CString(value)
	defer C.free(unsafe.Pointer(cn))
	defer C.free(unsafe.Pointer(cv))
	errstr := make([]byte, 512)
	switch C.rd_kafka_conf_set(conf, cn, cv, (*C.char)(unsafe.Pointer(&errstr[0])), C.size_t(len(errstr))) {
	case 0:
		return nil
	case confUnknown:
		return errUnknown
	default:
		if Secret(name) {
			return fmt.Errorf("librdkafka refuses the value of %s", name)
		}
		return errors.New(strings.TrimRight(string(errstr), "\x00"))
	}
}

// minLibrdkafka is the oldest librdkafka confluent-kafka-go v2.11.1 links
// against (its kafka/00version.go, MIN_RD_KAFKA_VERSION); a test keeps it
// in step with go.mod.
const minLibrdkafka = "2.11.1"

// CheckFeatures fails when settings ask for what the linked librdkafka was
// not built with: TLS, or the SASL mechanism named. GSSAPI (Kerberos) is
// the one a user meets: confluent-kafka-go's bundled librdkafka has none on
// Linux.
func CheckFeatures(settings map[string]string) error {
	return checkFeatures(settings, Features())
}

func checkFeatures(settings map[string]string, have []string) error {
	proto := strings.ToLower(settings["security.protocol"])
	mech := settings["sasl.mechanisms"]
	if mech == "" {
		mech = settings["sasl.mechanism"]
	}
	var need []string
	if proto == "ssl" || proto == "sasl_ssl" {
		need = append(need, "ssl")
	}
	if strings.HasPrefix(proto, "sasl_") {
		if mech == "" {
			mech = "GSSAPI" // librdkafka's default, as Java's
		}
		switch strings.ToUpper(mech) {
		case "GSSAPI":
			need = append(need, "sasl_gssapi")
		case "PLAIN":
			need = append(need, "sasl_plain")
		case "SCRAM-SHA-256", "SCRAM-SHA-512":
			need = append(need, "sasl_scram")
		case "OAUTHBEARER":
			need = append(need, "sasl_oauthbearer")
		}
	}
	for _, f := range need {
		if slices.Contains(have, f) {
			continue
		}
		_, v := kafka.LibraryVersion()
		lib := fmt.Sprintf("the librdkafka %s linked into this program was built without %s (its builtin.features: %s)", v, f, strings.Join(have, ", "))
		if f == "sasl_gssapi" {
			return fmt.Errorf("%w: sasl.mechanism GSSAPI (Kerberos): %s. "+
				"confluent-kafka-go's bundled librdkafka has no GSSAPI on Linux: "+
				"build with `go build -tags dynamic` against a system librdkafka %s or later built with SASL/GSSAPI (libsasl2; pkg-config --modversion rdkafka shows the version a build links); see docs/security.md, \"Kerberos (GSSAPI)\"",
				ErrUnsupported, lib, minLibrdkafka)
		}
		return fmt.Errorf("%w: security.protocol %s, sasl.mechanism %s: %s", ErrUnsupported, proto, mech, lib)
	}
	return nil
}

// ErrUnsupported is a setting the linked librdkafka cannot serve.
var ErrUnsupported = errors.New("kafka client feature missing")
