package kafkaconf

import (
	"bytes"
	"fmt"
	"os"
	"strconv"
	"unicode/utf16"
	"unicode/utf8"
)

// Property is one entry of a Java properties file.
type Property struct {
	Key, Value string
	Line       int // where its logical line starts, from 1
}

// ReadProperties reads a Java properties file (client.properties).
func ReadProperties(path string) ([]Property, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	return ParseProperties(b, path)
}

// ParseProperties parses the text of a Java properties file as
// java.util.Properties.load(InputStream) does (OpenJDK,
// java/util/Properties.java): bytes are ISO 8859-1 characters; '#' or '!'
// starts a comment line; a key ends at the first unescaped '=', ':' or
// white space; a backslash at a line's end continues it on the next line,
// whose leading white space is dropped; \t \n \r \f and \uXXXX are escapes
// and a backslash before any other character stands for that character.
// A key given twice keeps its last value, as in Java. name is the file's
// name, used in errors, which never quote a value (it may be a secret).
func ParseProperties(b []byte, name string) ([]Property, error) {
	// ISO 8859-1: each byte is the code point of its value.
	runes := make([]rune, len(b))
	for i, c := range b {
		runes[i] = rune(c)
	}
	var out []Property
	index := map[string]int{}
	lines := splitLines(runes)
	for i := 0; i < len(lines); i++ {
		start := i + 1
		line := trimLeft(lines[i])
		if len(line) == 0 || line[0] == '#' || line[0] == '!' {
			continue
		}
		// Join continuation lines: an odd number of trailing backslashes.
		logical := append([]rune(nil), line...)
		for trailingBackslashes(logical)%2 == 1 {
			logical = logical[:len(logical)-1]
			if i+1 >= len(lines) {
				break
			}
			i++
			logical = append(logical, trimLeft(lines[i])...)
		}
		key, value, err := splitEntry(logical)
		if err != nil {
			return nil, fmt.Errorf("%s:%d: %w", name, start, err)
		}
		if j, ok := index[key]; ok {
			out[j] = Property{Key: key, Value: value, Line: start}
			continue
		}
		index[key] = len(out)
		out = append(out, Property{Key: key, Value: value, Line: start})
	}
	return out, nil
}

func splitLines(r []rune) [][]rune {
	var lines [][]rune
	start := 0
	for i := 0; i < len(r); i++ {
		if r[i] == '\n' || r[i] == '\r' {
			lines = append(lines, r[start:i])
			if r[i] == '\r' && i+1 < len(r) && r[i+1] == '\n' {
				i++
			}
			start = i + 1
		}
	}
	if start < len(r) {
		lines = append(lines, r[start:])
	}
	return lines
}

func isSpace(c rune) bool { return c == ' ' || c == '\t' || c == '\f' }

func trimLeft(r []rune) []rune {
	for len(r) > 0 && isSpace(r[0]) {
		r = r[1:]
	}
	return r
}

func trailingBackslashes(r []rune) int {
	n := 0
	for i := len(r) - 1; i >= 0 && r[i] == '\\'; i-- {
		n++
	}
	return n
}

// splitEntry splits a logical line into its unescaped key and value.
func splitEntry(r []rune) (string, string, error) {
	end := len(r)
	for i := 0; i < len(r); i++ {
		if r[i] == '\\' {
			i++ // the escaped character never ends the key
			continue
		}
		if r[i] == '=' || r[i] == ':' || isSpace(r[i]) {
			end = i
			break
		}
	}
	rest := trimLeft(r[end:])
	if len(rest) > 0 && (rest[0] == '=' || rest[0] == ':') {
		rest = trimLeft(rest[1:])
	}
	key, err := unescape(r[:end])
	if err != nil {
		return "", "", fmt.Errorf("key: %w", err)
	}
	value, err := unescape(rest)
	if err != nil {
		return "", "", fmt.Errorf("the value of %s: %w", key, err)
	}
	return key, value, nil
}

func unescape(r []rune) (string, error) {
	var b bytes.Buffer
	for i := 0; i < len(r); i++ {
		if r[i] != '\\' {
			b.WriteRune(r[i])
			continue
		}
		i++
		if i >= len(r) {
			break // a lone backslash at the end: Java drops it
		}
		switch r[i] {
		case 't':
			b.WriteByte('\t')
		case 'n':
			b.WriteByte('\n')
		case 'r':
			b.WriteByte('\r')
		case 'f':
			b.WriteByte('\f')
		case 'u':
			v, ok := hex4(r, i+1)
			if !ok {
				return "", fmt.Errorf("malformed \\uxxxx escape")
			}
			i += 4
			// A UTF-16 surrogate pair, written as two escapes.
			if utf16.IsSurrogate(v) && i+6 < len(r) && r[i+1] == '\\' && r[i+2] == 'u' {
				if lo, ok := hex4(r, i+3); ok {
					if c := utf16.DecodeRune(v, lo); c != utf8.RuneError {
						v = c
						i += 6
					}
				}
			}
			b.WriteRune(v)
		default:
			b.WriteRune(r[i])
		}
	}
	return b.String(), nil
}

func hex4(r []rune, at int) (rune, bool) {
	if at+4 > len(r) {
		return 0, false
	}
	v, err := strconv.ParseUint(string(r[at:at+4]), 16, 16)
	return rune(v), err == nil
}
