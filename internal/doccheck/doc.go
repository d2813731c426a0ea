// Package doccheck holds the tests that keep kord's documentation from
// going stale (issue 36). It has no code: the checks live in its tests,
// which read the module's sources with go/parser and its Markdown files as
// text.
//
//   - TestSnippets: every ```go block in README.md and docs/ is a copy of
//     compiled source, named by the marker line before it
//     (<!-- snippet: PATH --> or <!-- snippet: PATH#REGION -->);
//     go test ./internal/doccheck/ -run TestSnippets -update rewrites them.
//   - TestNames: every `pkg.Name` or `pkg.Type.Member` in backticks in
//     README.md, DESIGN.md and docs/ names a declaration of a kord package.
//   - TestDocLinks: every doc link (pkg.Name, Name or *pkg.Type.Method in
//     square brackets) in the module's doc comments resolves, and so does
//     every bare kordpkg.Name they mention.
//   - TestLinks: relative Markdown links lead to files that exist, and
//     their #anchors to headings that exist.
//   - TestCommands: every `go test` command in README.md, DESIGN.md,
//     docs/ and bench/ (RESULTS.md, the READMEs) runs something: its
//     packages exist in the module it runs in and have tests, and its
//     -run, -bench and -fuzz patterns match a function of them in a test
//     file its -tags build.
//   - TestGuides: the guides under docs/ cover every public package, and
//     each ends with a "## Next" section that links onwards.
package doccheck
