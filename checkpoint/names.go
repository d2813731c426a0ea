package checkpoint

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
//	                                                           (EncodeKeyGroups), or one key group or
//	                                                           instance (EncodeKeyGroup)
//	COMMITTED                                              the local committed marker
//	JOB                                                    the job whose checkpoints these are (ClaimJob)
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
	// storage (ClaimJob).
	JobName = "JOB"

	namePrefix  = "ckpt-"
	metaSuffix  = ".meta"
	stateSuffix = ".avro"
	opPrefix    = ".op-"
	kgInfix     = "-kg-"
	tempPrefix  = ".tmp."

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
	return fmt.Sprintf("%s%s-%0*d", namePrefix, run, idDigits, id)
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

// checkpointPrefix is the prefix shared by every object of checkpoint (run, id).
func checkpointPrefix(run string, id uint64) string {
	return base(run, id) + "."
}

// ValidateRun reports whether run is a valid run id: 1 to 32 lowercase hex
// digits.
func ValidateRun(run string) error {
	if len(run) == 0 || len(run) > maxRunLen {
		return fmt.Errorf("checkpoint: run id %q: want 1 to %d lowercase hex digits", run, maxRunLen)
	}
	for i := 0; i < len(run); i++ {
		if c := run[i]; !('0' <= c && c <= '9' || 'a' <= c && c <= 'f') {
			return fmt.Errorf("checkpoint: run id %q: want 1 to %d lowercase hex digits", run, maxRunLen)
		}
	}
	return nil
}

// ValidateOperator reports whether op is a valid operator name for a state
// file: 1 to 128 characters of [a-zA-Z0-9_.-].
func ValidateOperator(op string) error {
	if len(op) == 0 || len(op) > maxOpLen {
		return fmt.Errorf("checkpoint: operator name %q: want 1 to %d characters of [a-zA-Z0-9_.-]", op, maxOpLen)
	}
	for i := 0; i < len(op); i++ {
		c := op[i]
		if !('0' <= c && c <= '9' || 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || c == '_' || c == '.' || c == '-') {
			return fmt.Errorf("checkpoint: operator name %q: want 1 to %d characters of [a-zA-Z0-9_.-]", op, maxOpLen)
		}
	}
	return nil
}

func validateKeyGroup(kg int) error {
	if kg < 0 || kg >= MaxKeyGroups {
		return fmt.Errorf("checkpoint: key group %d out of range [0, %d)", kg, MaxKeyGroups)
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
	rest, ok := strings.CutPrefix(name, namePrefix)
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

func isTempName(name string) bool { return strings.HasPrefix(name, tempPrefix) }
