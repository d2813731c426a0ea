//go:build !kordfailpoints

package filesink

// hit passes a crash point: nothing outside builds with the
// kordfailpoints tag.
func hit(string) {}
