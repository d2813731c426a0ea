package kafkaconf

import (
	"testing"

	"github.com/stretchr/testify/require"
)

func TestParseProperties(t *testing.T) {
	text := "# a comment\n" +
		"! another comment\n" +
		"\n" +
		"a=1\n" +
		"b = 2\n" +
		"c:3\n" +
		"d 4\n" +
		"   e\t=\t five  \n" + // leading white space dropped, trailing kept
		"f=one,\\\n" +
		"     two\n" + // a continuation's leading white space dropped
		"g=tab\\there\\u00e9\\=\n" +
		"key\\ with\\:escapes=x\n" +
		"h=\\uD83D\\uDE00\n" + // a surrogate pair
		"a=last wins\r\n" +
		"latin1=\xe9\n" +
		"empty\n" +
		"trailing=\\\\\n" // an escaped backslash does not continue the line
	props, err := ParseProperties([]byte(text+"next=ok"), "client.properties")
	require.NoError(t, err)
	got := map[string]string{}
	lines := map[string]int{}
	for _, p := range props {
		got[p.Key] = p.Value
		lines[p.Key] = p.Line
	}
	require.Equal(t, map[string]string{
		"a": "last wins", "b": "2", "c": "3", "d": "4", "e": "five  ", "f": "one,two",
		"g": "tab\there\u00e9=", "key with:escapes": "x", "h": "\U0001F600", "latin1": "\u00e9",
		"empty": "", "trailing": "\\", "next": "ok",
	}, got)
	require.Equal(t, 14, lines["a"], "a key given twice keeps its last line")
	require.Equal(t, 9, lines["f"])

	_, err = ParseProperties([]byte("a=1\nbad=\\u12x4\n"), "p.properties")
	require.ErrorContains(t, err, "p.properties:2: the value of bad: malformed \\uxxxx escape")
}

func TestParseJAAS(t *testing.T) {
	m, err := parseJAAS(`org.apache.kafka.common.security.scram.ScramLoginModule required
		username="kord" // a comment
		password="p\"w;=x" /* another */ ;`)
	require.NoError(t, err)
	require.Equal(t, scramModule, m.class)
	require.Equal(t, "required", m.flag)
	require.Equal(t, map[string]string{"username": "kord", "password": `p"w;=x`}, m.options)

	m, err = parseJAAS(`com.sun.security.auth.module.Krb5LoginModule REQUIRED useKeyTab=true keyTab="/etc/k.keytab" principal="c@EX.COM";`)
	require.NoError(t, err)
	require.Equal(t, "true", m.options["useKeyTab"])

	for in, want := range map[string]string{
		`a.B required x="1"`:                    "missing ';'",
		`a.B required x="1"; c.D required;`:     "holds 2 login modules",
		`a.B mandatory;`:                        "invalid control flag",
		`a.B required x=;`:                      "option x: expected name=value",
		`a.B required x="1`:                     "unterminated quoted string",
		``:                                      "holds 0 login modules",
		`a.B required x="secret-value" y="z" !`: "unexpected character",
	} {
		_, err := parseJAAS(in)
		require.ErrorContains(t, err, want, in)
		require.NotContains(t, err.Error(), "secret-value")
	}
}
