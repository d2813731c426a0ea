module example.com/toysink

go 1.26.0

require github.com/kordproject/kord v0.0.0

require (
	github.com/cespare/xxhash/v2 v2.3.0 // indirect
	github.com/goccy/go-json v0.12.0 // indirect
	github.com/golang/snappy v0.0.1 // indirect
	github.com/linkedin/goavro/v2 v2.15.0 // indirect
)

replace github.com/kordproject/kord => ../..
