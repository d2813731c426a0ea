package kafkaconf

import (
	"fmt"
	"strings"
	"unicode"
)

// jaasModule is the one login module of a sasl.jaas.config value.
type jaasModule struct {
	class   string
	flag    string
	options map[string]string
	order   []string // option names as written
}

// parseJAAS parses a sasl.jaas.config value the way Kafka's JaasConfig
// does (Kafka, clients/.../common/security/JaasConfig.java, on
// java.io.StreamTokenizer): `Class flag name=value ... ;`, values bare
// words or double-quoted strings, // and /* */ comments, exactly one login
// module. Errors name options, never their values.
func parseJAAS(s string) (*jaasModule, error) {
	toks, err := jaasTokens(s)
	if err != nil {
		return nil, err
	}
	var mods []*jaasModule
	for i := 0; i < len(toks); {
		if toks[i].kind != 'w' {
			return nil, fmt.Errorf("expected a login module class, found %q", toks[i].show())
		}
		m := &jaasModule{class: toks[i].text, options: map[string]string{}}
		i++
		if i >= len(toks) || toks[i].kind != 'w' {
			return nil, fmt.Errorf("login module %s: expected a control flag (required, requisite, sufficient or optional)", m.class)
		}
		switch f := strings.ToLower(toks[i].text); f {
		case "required", "requisite", "sufficient", "optional":
			m.flag = f
		default:
			return nil, fmt.Errorf("login module %s: invalid control flag %q", m.class, toks[i].text)
		}
		i++
		for {
			if i >= len(toks) {
				return nil, fmt.Errorf("login module %s: missing ';' at the end", m.class)
			}
			if toks[i].kind == ';' {
				i++
				break
			}
			if toks[i].kind != 'w' {
				return nil, fmt.Errorf("login module %s: expected an option name, found %q", m.class, toks[i].show())
			}
			name := toks[i].text
			if i+2 >= len(toks) || toks[i+1].kind != '=' || (toks[i+2].kind != 'w' && toks[i+2].kind != '"') {
				return nil, fmt.Errorf("login module %s: option %s: expected name=value", m.class, name)
			}
			if _, dup := m.options[name]; !dup {
				m.order = append(m.order, name)
			}
			m.options[name] = toks[i+2].text
			i += 3
		}
		mods = append(mods, m)
	}
	if len(mods) != 1 {
		// Kafka: "JAAS config property contains N login modules, should be 1 module".
		return nil, fmt.Errorf("holds %d login modules; Kafka clients take exactly 1", len(mods))
	}
	return mods[0], nil
}

type jaasToken struct {
	kind rune // 'w' word, '"' quoted string, '=', ';'
	text string
}

func (t jaasToken) show() string {
	if t.kind == '"' {
		return "a quoted string"
	}
	return t.text
}

func jaasTokens(s string) ([]jaasToken, error) {
	var out []jaasToken
	r := []rune(s)
	isWord := func(c rune) bool {
		return unicode.IsLetter(c) || unicode.IsDigit(c) || strings.ContainsRune("._-$", c)
	}
	for i := 0; i < len(r); {
		c := r[i]
		switch {
		case unicode.IsSpace(c):
			i++
		case c == '/' && i+1 < len(r) && r[i+1] == '/':
			for i < len(r) && r[i] != '\n' {
				i++
			}
		case c == '/' && i+1 < len(r) && r[i+1] == '*':
			j := i + 2
			for j+1 < len(r) && (r[j] != '*' || r[j+1] != '/') {
				j++
			}
			if j+1 >= len(r) {
				return nil, fmt.Errorf("unterminated /* comment")
			}
			i = j + 2
		case c == '=' || c == ';':
			out = append(out, jaasToken{kind: c, text: string(c)})
			i++
		case c == '"':
			var b strings.Builder
			i++
			closed := false
			for i < len(r) {
				if r[i] == '"' {
					closed = true
					i++
					break
				}
				if r[i] == '\\' && i+1 < len(r) {
					i++
					switch r[i] {
					case 'n':
						b.WriteRune('\n')
					case 't':
						b.WriteRune('\t')
					case 'r':
						b.WriteRune('\r')
					default:
						b.WriteRune(r[i])
					}
					i++
					continue
				}
				b.WriteRune(r[i])
				i++
			}
			if !closed {
				return nil, fmt.Errorf("unterminated quoted string")
			}
			out = append(out, jaasToken{kind: '"', text: b.String()})
		case isWord(c):
			j := i
			for j < len(r) && isWord(r[j]) {
				j++
			}
			out = append(out, jaasToken{kind: 'w', text: string(r[i:j])})
			i = j
		default:
			return nil, fmt.Errorf("unexpected character %q", c)
		}
	}
	return out, nil
}
