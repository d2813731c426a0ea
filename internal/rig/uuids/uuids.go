// Package uuids makes the keys kord's tests use: random version-4 UUID
// strings, like the user ids the seed job keys its events by. It imports
// nothing of kord, so that the engine's own packages can use it in their
// tests.
package uuids

import (
	"fmt"
	"math/rand/v2"
)

// V4 returns a random version-4 UUID string from r (RFC 9562, section
// 5.4: version 4 in the high nibble of octet 6, variant 10 in octet 8).
func V4(r *rand.Rand) string {
	var b [16]byte
	for i := range b {
		b[i] = byte(r.Uint32())
	}
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	return fmt.Sprintf("%x-%x-%x-%x-%x", b[0:4], b[4:6], b[6:8], b[8:10], b[10:16])
}
