package kafkaconf

import (
	"sort"
	"strings"
)

// The login modules of Java's clients (Kafka, clients/.../common/security;
// the JDK's Krb5LoginModule).
const (
	plainModule = "org.apache.kafka.common.security.plain.PlainLoginModule"
	scramModule = "org.apache.kafka.common.security.scram.ScramLoginModule"
	krb5Module  = "com.sun.security.auth.module.Krb5LoginModule"
	oauthModule = "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule"
	// Java's OIDC client-credentials handler (KIP-768).
	oidcHandler = "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginCallbackHandler"
)

// sasl maps sasl.jaas.config (and the properties that go with it) to
// librdkafka's SASL settings.
func (m *mapper) sasl() error {
	const k = "sasl.jaas.config"
	mech := strings.ToUpper(m.out["sasl.mechanisms"])
	saslProto := strings.HasPrefix(m.out["security.protocol"], "sasl_")
	if !m.has(k) {
		if saslProto {
			return m.errf("security.protocol", "SASL needs sasl.jaas.config: kord reads the credentials from it (it does not read a JAAS file named by java.security.auth.login.config)")
		}
		for _, o := range []string{"sasl.kerberos.kinit.cmd", "sasl.login.callback.handler.class", "sasl.oauthbearer.token.endpoint.url"} {
			if m.has(o) {
				return m.errf(o, "set without sasl.jaas.config")
			}
		}
		return m.serviceName("")
	}
	mod, err := parseJAAS(m.get(k))
	if err != nil {
		return m.errf(k, "%v", err)
	}
	if mech == "" {
		mech = "GSSAPI" // Java's default sasl.mechanism, and librdkafka's
	}
	want := map[string]string{plainModule: "PLAIN", scramModule: "SCRAM-SHA-256 or SCRAM-SHA-512", krb5Module: "GSSAPI", oauthModule: "OAUTHBEARER"}
	fits := map[string]bool{plainModule: mech == "PLAIN", scramModule: mech == "SCRAM-SHA-256" || mech == "SCRAM-SHA-512",
		krb5Module: mech == "GSSAPI", oauthModule: mech == "OAUTHBEARER"}
	w, known := want[mod.class]
	if !known {
		return m.errf(k, "login module %s has no librdkafka equivalent: librdkafka offers PLAIN and SCRAM (%s, %s), GSSAPI (%s) and OAUTHBEARER (%s)",
			mod.class, plainModule, scramModule, krb5Module, oauthModule)
	}
	if !fits[mod.class] {
		return m.errf(k, "login module %s does not fit sasl.mechanism %s (Java's default when unset is GSSAPI): set sasl.mechanism to %s", mod.class, mech, w)
	}
	if err := m.set("sasl.mechanisms", mech, "sasl.mechanism"); err != nil {
		return err
	}
	// Properties only one login uses are refused with the others, never
	// dropped.
	uses := map[string][]string{
		krb5Module:  {"sasl.kerberos.kinit.cmd", "sasl.kerberos.service.name"},
		oauthModule: {"sasl.login.callback.handler.class", "sasl.oauthbearer.token.endpoint.url"},
	}
	for owner, props := range uses {
		if owner == mod.class {
			continue
		}
		for _, p := range props {
			if m.has(p) {
				return m.errf(p, "does not apply to the %s login of sasl.jaas.config", mod.class)
			}
		}
	}
	switch mod.class {
	case plainModule, scramModule:
		return m.userPassword(mod)
	case krb5Module:
		return m.kerberos(mod)
	default:
		return m.oauth(mod)
	}
}

// options checks that mod has only the options in allowed.
func (m *mapper) options(mod *jaasModule, allowed map[string]string) error {
	var bad []string
	for _, o := range mod.order {
		if _, ok := allowed[o]; !ok {
			bad = append(bad, o)
		}
	}
	if len(bad) == 0 {
		return nil
	}
	var names []string
	for n := range allowed {
		names = append(names, n)
	}
	sort.Strings(names)
	return m.errf("sasl.jaas.config", "%s option %s has no librdkafka equivalent (kord maps %s)", mod.class, strings.Join(bad, ", "), strings.Join(names, ", "))
}

func (m *mapper) userPassword(mod *jaasModule) error {
	if err := m.options(mod, map[string]string{"username": "sasl.username", "password": "sasl.password"}); err != nil {
		return err
	}
	for _, o := range []string{"username", "password"} {
		if _, ok := mod.options[o]; !ok {
			return m.errf("sasl.jaas.config", "%s needs the option %s", mod.class, o)
		}
	}
	if err := m.set("sasl.username", mod.options["username"], "sasl.jaas.config"); err != nil {
		return err
	}
	return m.set("sasl.password", mod.options["password"], "sasl.jaas.config")
}

// kerberos maps the JDK's Krb5LoginModule options to librdkafka's
// sasl.kerberos.* settings. librdkafka gets its ticket by running
// sasl.kerberos.kinit.cmd with the keytab and principal, and renews it
// every sasl.kerberos.min.time.before.relogin ms; with the ticket cache
// alone (useTicketCache=true, no keytab) it must not run kinit, so the
// renewal is turned off and the cache kinit filled is used.
func (m *mapper) kerberos(mod *jaasModule) error {
	allowed := map[string]string{
		"useKeyTab": "", "keyTab": "sasl.kerberos.keytab", "principal": "sasl.kerberos.principal",
		"serviceName": "sasl.kerberos.service.name", "useTicketCache": "", "storeKey": "", "doNotPrompt": "",
		"isInitiator": "", "refreshKrb5Config": "", "renewTGT": "", "debug": "",
	}
	if err := m.options(mod, allowed); err != nil {
		return err
	}
	on := func(o string) bool { return strings.EqualFold(mod.options[o], "true") }
	if v, ok := mod.options["isInitiator"]; ok && !strings.EqualFold(v, "true") {
		return m.errf("sasl.jaas.config", "Krb5LoginModule isInitiator=false: a Kafka client always initiates")
	}
	switch {
	case on("useKeyTab"):
		if mod.options["keyTab"] == "" {
			return m.errf("sasl.jaas.config", "Krb5LoginModule useKeyTab=true needs keyTab: librdkafka's kinit is given the keytab's path")
		}
		if err := m.readable("sasl.jaas.config", mod.options["keyTab"]); err != nil {
			return err
		}
		if err := m.set("sasl.kerberos.keytab", mod.options["keyTab"], "sasl.jaas.config"); err != nil {
			return err
		}
	case on("useTicketCache"):
		// The cache kinit filled (KRB5CCNAME or the default); librdkafka
		// must not run its own kinit, which needs a keytab.
		if err := m.set("sasl.kerberos.min.time.before.relogin", "0", "sasl.jaas.config"); err != nil {
			return err
		}
	default:
		return m.errf("sasl.jaas.config", "Krb5LoginModule needs useKeyTab=true with keyTab, or useTicketCache=true (a client cannot prompt for a password)")
	}
	if mod.options["principal"] == "" {
		if on("useKeyTab") {
			return m.errf("sasl.jaas.config", "Krb5LoginModule needs principal: librdkafka's kinit is given it")
		}
	} else if err := m.set("sasl.kerberos.principal", mod.options["principal"], "sasl.jaas.config"); err != nil {
		return err
	}
	if on("debug") {
		if err := m.set("debug", "security", "sasl.jaas.config"); err != nil {
			return err
		}
	}
	if m.has("sasl.kerberos.kinit.cmd") {
		const k = "sasl.kerberos.kinit.cmd"
		path := strings.TrimSpace(m.get(k))
		if path == "" || strings.ContainsAny(path, " \t") {
			return m.errf(k, "Java's sasl.kerberos.kinit.cmd is the path of kinit; librdkafka's whole command is set by its own name with Set")
		}
		// librdkafka's default command (CONFIGURATION.md,
		// sasl.kerberos.kinit.cmd) with Java's kinit.
		cmd := path + ` -R -t "%{sasl.kerberos.keytab}" -k %{sasl.kerberos.principal} || ` +
			path + ` -t "%{sasl.kerberos.keytab}" -k %{sasl.kerberos.principal}`
		if err := m.set(k, cmd, k); err != nil {
			return err
		}
	}
	return m.serviceName(mod.options["serviceName"])
}

// serviceName sets sasl.kerberos.service.name from the property or the
// JAAS option serviceName; both given must agree.
func (m *mapper) serviceName(jaas string) error {
	const k = "sasl.kerberos.service.name"
	prop := m.get(k)
	if m.has(k) && jaas != "" && prop != jaas {
		return m.errf(k, "differs from the serviceName of sasl.jaas.config")
	}
	v := jaas
	if v == "" {
		v = prop
	}
	if v == "" {
		return nil
	}
	return m.set(k, v, k)
}

// oauth maps Java's OIDC client-credentials login (KIP-768:
// OAuthBearerLoginCallbackHandler with clientId, clientSecret and scope,
// and sasl.oauthbearer.token.endpoint.url) to librdkafka's
// sasl.oauthbearer.method=oidc.
func (m *mapper) oauth(mod *jaasModule) error {
	if m.get("sasl.login.callback.handler.class") != oidcHandler || !m.has("sasl.oauthbearer.token.endpoint.url") {
		return m.errf("sasl.jaas.config", "OAuthBearerLoginModule: kord maps Java's OIDC login (sasl.login.callback.handler.class=%s with sasl.oauthbearer.token.endpoint.url); for other token sources use librdkafka's sasl.oauthbearer.* settings with Set", oidcHandler)
	}
	if err := m.options(mod, map[string]string{"clientId": "", "clientSecret": "", "scope": ""}); err != nil {
		return err
	}
	sets := [][2]string{
		{"sasl.oauthbearer.method", "oidc"},
		{"sasl.oauthbearer.token.endpoint.url", m.get("sasl.oauthbearer.token.endpoint.url")},
		{"sasl.oauthbearer.client.id", mod.options["clientId"]},
		{"sasl.oauthbearer.client.secret", mod.options["clientSecret"]},
	}
	if s, ok := mod.options["scope"]; ok {
		sets = append(sets, [2]string{"sasl.oauthbearer.scope", s})
	}
	for _, s := range sets {
		if err := m.set(s[0], s[1], "sasl.jaas.config"); err != nil {
			return err
		}
	}
	return nil
}
