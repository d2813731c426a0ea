package main

import (
	"encoding/json"
	"errors"
)

// event is the part of an input event the job reads. TS stays raw: the
// result carries it unchanged.
type event struct {
	UUID string          `json:"uuid"`
	Seq  int64           `json:"seq"`
	TS   json.RawMessage `json:"ts"`
}

// result is one output value.
type result struct {
	UUID  string          `json:"uuid"`
	Seq   int64           `json:"seq"`
	Count int64           `json:"count"`
	TS    json.RawMessage `json:"ts"`
}

func decodeEvent(b []byte) (event, error) {
	var ev event
	if err := json.Unmarshal(b, &ev); err != nil {
		return ev, err
	}
	if ev.UUID == "" {
		return ev, errors.New("event without uuid")
	}
	return ev, nil
}

func encodeResult(ev event, count int64) []byte {
	b, _ := json.Marshal(result{UUID: ev.UUID, Seq: ev.Seq, Count: count, TS: ev.TS})
	return b
}
