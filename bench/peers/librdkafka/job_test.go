package main

import "testing"

func TestResultCopiesTS(t *testing.T) {
	in := `{"uuid":"1b4e28ba-2fa1-41d2-883f-0016d3cca427","seq":41,"action":"click","page":"/item/7","ts":"2026-12-01T20:15:00.123456789Z"}`
	ev, err := decodeEvent([]byte(in))
	if err != nil {
		t.Fatal(err)
	}
	got := string(encodeResult(ev, 42))
	want := `{"uuid":"1b4e28ba-2fa1-41d2-883f-0016d3cca427","seq":41,"count":42,"ts":"2026-12-01T20:15:00.123456789Z"}`
	if got != want {
		t.Fatalf("got %s, want %s", got, want)
	}
}
