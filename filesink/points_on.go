//go:build kordfailpoints

package filesink

import "github.com/kordproject/kord/internal/failpoint"

// hit passes the named crash point: the process dies there if it is armed.
func hit(name string) { failpoint.Hit(name) }
