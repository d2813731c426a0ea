// Package accesslog is what the examples share about the access log the
// seed's jobs read: its events, and the rules that normalize a request's
// URI to its pattern.
package accesslog

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"regexp"
	"strings"
	"time"
)

// Access is one request of the access log, as the input topic holds it.
type Access struct {
	// ID is a unique request id, assigned by the generator (the check
	// finds each late event by it).
	ID          string    `json:"id"`
	IdentityURI string    `json:"identityUri"`
	Status      int       `json:"status"`
	LatencyMs   float64   `json:"latencyMs"`
	Time        time.Time `json:"time"`
}

// Rule rewrites a whole URI path to a fixed pattern.
type Rule struct {
	// Match is tried on the path (the URI without its query string) with
	// MatchString: an expression that is not anchored matches anywhere in
	// the path. ParseRules anchors the expressions it reads at both ends,
	// so that a rule from a file applies only when it matches the whole
	// path.
	Match *regexp.Regexp
	// Pattern replaces the path as written: no $1 expansion.
	Pattern string
}

// Normalizer rewrites request URIs to their patterns, so that requests for
// one endpoint share one key: yiyang/user/getById/13782 becomes
// yiyang/user/getById/{}.
type Normalizer struct {
	// Rules are tried first, in order; the first that matches gives the
	// pattern.
	Rules []Rule
}

// Pattern returns uri's pattern. A query string (from the first "?") is
// dropped first: neither the rules nor the pattern see it. The first rule
// whose Match matches the path gives the pattern. Otherwise the path is
// split on "/" and each segment that is an identifier becomes "{}" (see
// isIdentifier); a leading or trailing slash and empty segments ("a//b")
// stay as they are.
func (n Normalizer) Pattern(uri string) string {
	path, _, _ := strings.Cut(uri, "?")
	for _, r := range n.Rules {
		if r.Match.MatchString(path) {
			return r.Pattern
		}
	}
	var b strings.Builder
	b.Grow(len(path))
	for i, seg := range strings.Split(path, "/") {
		if i > 0 {
			b.WriteByte('/')
		}
		if isIdentifier(seg) {
			b.WriteString("{}")
		} else {
			b.WriteString(seg)
		}
	}
	return b.String()
}

// isIdentifier reports whether a path segment names one thing rather than
// an endpoint: all ASCII digits (a numeric id), a UUID in its canonical
// text form (RFC 9562 section 4: 8-4-4-4-12 hexadecimal digits, either
// case), or at least 16 hexadecimal digits (a hash or object id: 16 is
// the length of a 64-bit id in hex, and shorter runs such as "cafe" or
// "add" are often words).
func isIdentifier(seg string) bool {
	if seg == "" {
		return false
	}
	digits, hex := true, true
	for i := 0; i < len(seg); i++ {
		c := seg[i]
		if c < '0' || c > '9' {
			digits = false
		}
		if !isHex(c) {
			hex = false
		}
	}
	return digits || hex && len(seg) >= 16 || isUUID(seg)
}

func isHex(c byte) bool {
	return '0' <= c && c <= '9' || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F'
}

// isUUID reports whether s is a UUID's canonical text form:
// xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx, hexadecimal digits of either case.
func isUUID(s string) bool {
	if len(s) != 36 {
		return false
	}
	for i := 0; i < len(s); i++ {
		switch i {
		case 8, 13, 18, 23:
			if s[i] != '-' {
				return false
			}
		default:
			if !isHex(s[i]) {
				return false
			}
		}
	}
	return true
}

// LoadRules reads a rule file (see ParseRules).
func LoadRules(path string) ([]Rule, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("rules: %w", err)
	}
	defer f.Close()
	return ParseRules(path, f)
}

// ParseRules reads rules, one a line, as
//
//	REGEX => PATTERN
//
// split at the last "=>", each side trimmed of spaces. REGEX is Go's regexp
// syntax (RE2), anchored at both ends: the rule applies when it matches
// the whole path. Blank lines and lines starting with "#" (after spaces)
// are skipped. name names the input in errors, which give its line.
func ParseRules(name string, r io.Reader) ([]Rule, error) {
	var rules []Rule
	sc := bufio.NewScanner(r)
	for line := 1; sc.Scan(); line++ {
		text := strings.TrimSpace(sc.Text())
		if text == "" || strings.HasPrefix(text, "#") {
			continue
		}
		i := strings.LastIndex(text, "=>")
		if i < 0 {
			return nil, fmt.Errorf("rules %s:%d: %q: want REGEX => PATTERN", name, line, text)
		}
		expr, pattern := strings.TrimSpace(text[:i]), strings.TrimSpace(text[i+len("=>"):])
		if expr == "" {
			return nil, fmt.Errorf("rules %s:%d: no expression before =>", name, line)
		}
		if pattern == "" {
			return nil, fmt.Errorf("rules %s:%d: no pattern after =>", name, line)
		}
		re, err := regexp.Compile(`^(?:` + expr + `)$`)
		if err != nil {
			return nil, fmt.Errorf("rules %s:%d: %w", name, line, err)
		}
		rules = append(rules, Rule{Match: re, Pattern: pattern})
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("rules %s: %w", name, err)
	}
	return rules, nil
}
