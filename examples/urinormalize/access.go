package main

import "github.com/kordproject/kord/examples/accesslog"

// The access log and its normalizer, shared with examples/tohive.
type (
	Access     = accesslog.Access
	Rule       = accesslog.Rule
	Normalizer = accesslog.Normalizer
)

// LoadRules reads the rules of -rules FILE (accesslog.LoadRules).
func LoadRules(path string) ([]Rule, error) { return accesslog.LoadRules(path) }
