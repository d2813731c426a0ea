// Package peers compares kord with other Go Kafka clients on the same job.
// It is a module of its own so that the peers it imports (franz-go's kgo)
// stay out of kord's go.mod; kord itself comes from ../.. through a replace
// directive.
//
//	cd bench/peers && go test -run XXX -bench . -count 10 ./... | tee new.txt
//	benchstat -col /impl new.txt
package peers
