// Package layout owns the grammar of checkpoint object names: what
// MetaName and StateFileName make and ParseName reads back, the run and
// operator names they admit, the "<operator>.<state>" split of a keyed
// state's operator slot (SplitOperator), and which names an Objects may
// hold at all (ValidObjectName). Nothing else in kord builds or parses a
// checkpoint object's name.
package layout

import (
	"fmt"
	"strconv"
	"strings"
)

// Object names in a checkpoint directory. Every checkpoint object has a flat
// name that carries the run id and the checkpoint id, so a listing of the
// directory is enough to know what exists, and the files of a zombie
// incarnation (another run id) never collide with the current one's:
//
//	ckpt-<run>-<id:020d>.meta                              metadata (written last)
//	ckpt-<run>-<id:020d>.op-<operator>-kg-<keygroup:05d>.avro  state file: keyed state from a key group on
//	                                                           (statefile.EncodeKeyGroups), or one key group or
//	                                                           instance (statefile.EncodeKeyGroup)
//	COMMITTED                                              the local committed marker
//	JOB                                                    the job whose checkpoints these are (retain.Claim)
//	LOCK                                                   the directory lock
//
// The zero-padded id makes a lexical listing sort by checkpoint id within a
// run. MetaName, StateFileName and ParseName are the only places that know
// this layout.
const (
	// CommittedName is the name of the local committed-marker pointer.
	CommittedName = "COMMITTED"
	// LockName is the name of the lock file that OpenStore holds.
	LockName = "LOCK"
	// JobName is the name of the object naming the job that owns shared
	// storage (retain.Claim).
	JobName = "JOB"

	// Prefix starts the name of every object of a checkpoint.
	Prefix = "ckpt-"
	// TempPrefix starts the name of a temp file a writer has not yet
	// renamed or linked to its object's name.
	TempPrefix = ".tmp."

	metaSuffix  = ".meta"
	stateSuffix = ".avro"
	opPrefix    = ".op-"
	kgInfix     = "-kg-"

	idDigits = 20
	kgDigits = 5

	// MaxKeyGroups bounds maxParallelism: key groups are 0..MaxKeyGroups-1
	// so that they fit the five digits of a state file name. Flink's upper
	// bound is 32768.
	MaxKeyGroups = 100000
	maxRunLen    = 32
	maxOpLen     = 128
)

// Kind is the kind of object a name denotes.
type Kind int

// Kinds of object names.
const (
	KindUnknown   Kind = iota
	KindMeta           // checkpoint metadata
	KindState          // keyed-state file of one operator and key group
	KindCommitted      // the COMMITTED pointer
)

func (k Kind) String() string {
	switch k {
	case KindMeta:
		return "meta"
	case KindState:
		return "state"
	case KindCommitted:
		return "committed"
	}
	return "unknown"
}

// Name is a parsed object name. Run and ID are set for KindMeta and
// KindState; Operator and KeyGroup for KindState only.
type Name struct {
	Kind     Kind
	Run      string
	ID       uint64
	Operator string
	KeyGroup int
}

// String makes the object name back; ParseName(n.String()) == n for every n
// that ParseName returned.
func (n Name) String() string {
	switch n.Kind {
	case KindMeta:
		return MetaName(n.Run, n.ID)
	case KindState:
		return StateFileName(n.Run, n.ID, n.Operator, n.KeyGroup)
	case KindCommitted:
		return CommittedName
	}
	return ""
}

func base(run string, id uint64) string {
	return fmt.Sprintf("%s%s-%0*d", Prefix, run, idDigits, id)
}

// MetaName is the name of checkpoint (run, id)'s metadata object. The run is
// not validated here; ValidateRun does that.
func MetaName(run string, id uint64) string {
	return base(run, id) + metaSuffix
}

// StateFileName is the name of operator's state file in checkpoint (run,
// id) whose first (or only) key group, or whose instance, is keyGroup.
func StateFileName(run string, id uint64, operator string, keyGroup int) string {
	return fmt.Sprintf("%s%s%s%s%0*d%s", base(run, id), opPrefix, operator, kgInfix, kgDigits, keyGroup, stateSuffix)
}

// CheckpointPrefix is the prefix shared by every object of checkpoint (run, id).
func CheckpointPrefix(run string, id uint64) string {
	return base(run, id) + "."
}

// ValidateRun reports whether run is a valid run id: 1 to 32 lowercase hex
// digits.
func ValidateRun(run string) error {
	if len(run) == 0 || len(run) > maxRunLen {
		return fmt.Errorf("layout: run id %q: want 1 to %d lowercase hex digits", run, maxRunLen)
	}
	for i := 0; i < len(run); i++ {
		if c := run[i]; !('0' <= c && c <= '9' || 'a' <= c && c <= 'f') {
			return fmt.Errorf("layout: run id %q: want 1 to %d lowercase hex digits", run, maxRunLen)
		}
	}
	return nil
}

// ValidateOperator reports whether op is a valid operator name for a state
// file: 1 to 128 characters of [a-zA-Z0-9_.-].
func ValidateOperator(op string) error {
	if len(op) == 0 || len(op) > maxOpLen {
		return fmt.Errorf("layout: operator name %q: want 1 to %d characters of [a-zA-Z0-9_.-]", op, maxOpLen)
	}
	for i := 0; i < len(op); i++ {
		c := op[i]
		if !('0' <= c && c <= '9' || 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || c == '_' || c == '.' || c == '-') {
			return fmt.Errorf("layout: operator name %q: want 1 to %d characters of [a-zA-Z0-9_.-]", op, maxOpLen)
		}
	}
	return nil
}

// ValidateKeyGroup reports whether kg is in [0, MaxKeyGroups).
func ValidateKeyGroup(kg int) error {
	if kg < 0 || kg >= MaxKeyGroups {
		return fmt.Errorf("layout: key group %d out of range [0, %d)", kg, MaxKeyGroups)
	}
	return nil
}

func parseDigits(s string, n int) (uint64, bool) {
	if len(s) != n {
		return 0, false
	}
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return 0, false
		}
	}
	v, err := strconv.ParseUint(s, 10, 64)
	return v, err == nil
}

// ParseName parses an object name made by MetaName, StateFileName or
// CommittedName. It accepts only canonical names: for every name it accepts,
// the returned Name's String is name again.
func ParseName(name string) (Name, bool) {
	if name == CommittedName {
		return Name{Kind: KindCommitted}, true
	}
	rest, ok := strings.CutPrefix(name, Prefix)
	if !ok {
		return Name{}, false
	}
	dash := strings.IndexByte(rest, '-')
	if dash < 0 {
		return Name{}, false
	}
	run := rest[:dash]
	if ValidateRun(run) != nil {
		return Name{}, false
	}
	rest = rest[dash+1:]
	if len(rest) < idDigits {
		return Name{}, false
	}
	id, ok := parseDigits(rest[:idDigits], idDigits)
	if !ok {
		return Name{}, false
	}
	rest = rest[idDigits:]
	if rest == metaSuffix {
		return Name{Kind: KindMeta, Run: run, ID: id}, true
	}
	part, ok := strings.CutPrefix(rest, opPrefix)
	if !ok {
		return Name{}, false
	}
	part, ok = strings.CutSuffix(part, stateSuffix)
	if !ok || len(part) < len(kgInfix)+kgDigits {
		return Name{}, false
	}
	kg, ok := parseDigits(part[len(part)-kgDigits:], kgDigits)
	if !ok {
		return Name{}, false
	}
	op, ok := strings.CutSuffix(part[:len(part)-kgDigits], kgInfix)
	if !ok || ValidateOperator(op) != nil {
		return Name{}, false
	}
	return Name{Kind: KindState, Run: run, ID: id, Operator: op, KeyGroup: int(kg)}, true
}

// IsTemp reports whether name is a temp file's.
func IsTemp(name string) bool { return strings.HasPrefix(name, TempPrefix) }

// ValidObjectName reports whether name can name an object in every
// checkpoint.Objects: not empty, no path separator, not "." or "..", not
// the lock file's name nor a temp file's.
func ValidObjectName(name string) bool {
	return name != "" && name != "." && name != ".." && !strings.ContainsAny(name, `/\`) && name != LockName && !IsTemp(name)
}

// SplitOperator splits the operator slot of a keyed state's file name,
// "<operator>.<state>"; ok is false for a name without exactly one '.'
// with something on each side (an operator instance's own state, whose
// name has no '.').
func SplitOperator(s string) (operator, state string, ok bool) {
	operator, state, ok = strings.Cut(s, ".")
	if !ok || operator == "" || state == "" || strings.Contains(state, ".") {
		return "", "", false
	}
	return operator, state, true
}
