module github.com/kordproject/kord

go 1.26.0

require (
	github.com/cespare/xxhash/v2 v2.3.0
	github.com/confluentinc/confluent-kafka-go/v2 v2.11.1
	github.com/linkedin/goavro/v2 v2.15.0
	github.com/stretchr/testify v1.12.1
	github.com/twmb/franz-go v1.22.3 // above kfake's own floor (v1.21.7): this kfake calls kversion.Versions.EachSupportedFeature/EachFinalizedFeature, absent in v1.21.7
	github.com/twmb/franz-go/pkg/kfake v0.0.0-20260918054303-01f206a7e32c
	github.com/twmb/franz-go/pkg/kmsg v1.15.1
)

require (
	github.com/pavlo-v-chernykh/keystore-go/v4 v4.5.0
	software.sslmate.com/src/go-pkcs12 v0.7.4
)

require (
	github.com/golang/snappy v0.0.1 // indirect
	github.com/klauspost/compress v1.20.3 // indirect
	github.com/pierrec/lz4/v4 v4.1.33 // indirect
	go.yaml.in/yaml/v3 v3.0.5 // indirect
	golang.org/x/crypto v0.51.0 // indirect
)
