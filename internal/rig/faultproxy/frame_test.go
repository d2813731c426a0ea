package faultproxy

import (
	"bytes"
	"encoding/binary"
	"testing"

	"github.com/twmb/franz-go/pkg/kmsg"
)

// endTxnFrame builds an EndTxn request frame by hand, byte by byte from the
// protocol's definition: header v1 for versions 0-2, header v2 (with one
// tagged field, to prove it is skipped) for 3+. Correlation id 1.
func endTxnFrame(t testing.TB, version int16, commit bool) []byte {
	t.Helper()
	f := []byte{0x00, 0x1a} // api key 26
	f = binary.BigEndian.AppendUint16(f, uint16(version))
	f = append(f, 0, 0, 0, 1)    // correlation id
	f = append(f, 0, 4)          // client_id length
	f = append(f, "kord"...)     // client_id
	txnID := "kord-txn-\u00e9-1" // not ASCII: lengths are bytes
	if version >= 3 {
		f = append(f, 1)        // one header tagged field
		f = append(f, 0)        // tag 0
		f = append(f, 3)        // 3 bytes
		f = append(f, "xyz"...) //
		f = append(f, byte(len(txnID)+1))
	} else {
		f = binary.BigEndian.AppendUint16(f, uint16(len(txnID)))
	}
	f = append(f, txnID...)
	f = binary.BigEndian.AppendUint64(f, 0x0102030405060708) // producer_id
	f = binary.BigEndian.AppendUint16(f, 7)                  // producer_epoch
	if commit {
		f = append(f, 1)
	} else {
		f = append(f, 0)
	}
	if version >= 3 {
		f = append(f, 0) // body: no tagged fields
	}
	return f
}

func TestEndTxnCommitOnHandBuiltFrames(t *testing.T) {
	for _, v := range []int16{0, 1, 2, 3, 4, 5} {
		for _, commit := range []bool{true, false} {
			frame := endTxnFrame(t, v, commit)
			got, ok := EndTxnCommit(frame)
			if !ok || got != commit {
				t.Errorf("v%d commit=%v: EndTxnCommit = %v, %v", v, commit, got, ok)
			}
			if IsCommit(frame) != commit || IsAbort(frame) == commit {
				t.Errorf("v%d commit=%v: IsCommit %v IsAbort %v", v, commit, IsCommit(frame), IsAbort(frame))
			}
			// The hand-built frame is what franz-go's kmsg reads too.
			req, err := Decode(frame)
			if err != nil {
				t.Fatalf("v%d: %v", v, err)
			}
			et := req.(*kmsg.EndTxnRequest)
			if et.Commit != commit || et.TransactionalID != "kord-txn-\u00e9-1" || et.ProducerID != 0x0102030405060708 || et.ProducerEpoch != 7 {
				t.Errorf("v%d: kmsg reads %+v", v, et)
			}
			if id := ClientID(frame); id != "kord" {
				t.Errorf("v%d: ClientID %q", v, id)
			}
			// Every truncation before the committed byte is refused, and
			// none panics.
			end := len(frame)
			if v >= 3 {
				end-- // the body's trailing tag count is not needed
			}
			for n := 0; n < end; n++ {
				if _, ok := EndTxnCommit(frame[:n]); ok {
					t.Fatalf("v%d: a frame cut to %d of %d bytes parsed", v, n, len(frame))
				}
			}
		}
	}
}

// kmsg's encoding of every EndTxn version, behind a hand-built header.
func TestEndTxnCommitAgreesWithKmsg(t *testing.T) {
	for v := int16(0); v <= 5; v++ {
		for _, commit := range []bool{true, false} {
			req := kmsg.NewPtrEndTxnRequest()
			req.Version = v
			req.TransactionalID = "a-longer-transactional-id-" + string(bytes.Repeat([]byte("x"), 200))
			req.ProducerID = -5
			req.ProducerEpoch = 32767
			req.Commit = commit
			hdr := endTxnFrame(t, v, commit)
			hdrLen := 8 + 2 + 4
			if v >= 3 {
				hdrLen += 1 + 1 + 1 + 3
			}
			frame := req.AppendTo(append([]byte(nil), hdr[:hdrLen]...))
			got, ok := EndTxnCommit(frame)
			if !ok || got != commit {
				t.Errorf("v%d commit=%v: EndTxnCommit = %v, %v on kmsg's encoding", v, commit, got, ok)
			}
		}
	}
}

func TestEndTxnCommitRefuses(t *testing.T) {
	frame := endTxnFrame(t, 5, true)
	binary.BigEndian.PutUint16(frame[2:], 6) // a version this parser does not know
	if _, ok := EndTxnCommit(frame); ok {
		t.Error("parsed EndTxn v6")
	}
	frame = endTxnFrame(t, 1, true)
	binary.BigEndian.PutUint16(frame, uint16(AddOffsetsToTxn))
	if _, ok := EndTxnCommit(frame); ok || IsCommit(frame) || IsAbort(frame) {
		t.Error("parsed another API as EndTxn")
	}
	// A transactional id longer than the frame.
	frame = endTxnFrame(t, 4, true)
	frame[8+2+4+6] = 0xff
	if _, ok := EndTxnCommit(frame); ok {
		t.Error("parsed a frame whose compact string overruns it")
	}
}

func TestParseHeader(t *testing.T) {
	f := requestFrame(Metadata, 1, 42, []byte{9, 9})
	h, err := ParseHeader(f)
	if err != nil || h.API != Metadata || h.Version != 1 || h.Correlation != 42 || h.ClientID == nil || *h.ClientID != "test" || !bytes.Equal(h.Body, []byte{9, 9}) {
		t.Fatalf("ParseHeader = %+v, %v", h, err)
	}
	// Null client id.
	f = []byte{0, 3, 0, 1, 0, 0, 0, 5, 0xff, 0xff, 7}
	h, err = ParseHeader(f)
	if err != nil || h.ClientID != nil || !bytes.Equal(h.Body, []byte{7}) {
		t.Fatalf("null client id: %+v, %v", h, err)
	}
	if _, err := ParseHeader(f[:7]); err == nil {
		t.Fatal("parsed a 7-byte header")
	}
	if _, err := ParseHeader(f[:9]); err == nil {
		t.Fatal("parsed a header cut inside client_id's length")
	}
}

func TestProduceAcksZeroExpectsNoResponse(t *testing.T) {
	for _, v := range []int16{3, 8, 9, 11} {
		for _, acks := range []int16{0, 1, -1} {
			req := kmsg.NewPtrProduceRequest()
			req.Version = v
			req.Acks = acks
			req.TransactionID = kmsg.StringPtr("txn")
			hdr := requestFrame(Produce, v, 1, nil)
			if req.IsFlexible() {
				hdr = append(hdr, 0) // header v2: no tagged fields
			}
			h, err := ParseHeader(req.AppendTo(hdr))
			if err != nil {
				t.Fatal(err)
			}
			if got := expectsResponse(h); got != (acks != 0) {
				t.Errorf("Produce v%d acks=%d: expectsResponse = %v", v, acks, got)
			}
		}
	}
	if !expectsResponse(Header{API: Metadata}) {
		t.Error("Metadata expects no response?")
	}
}

func FuzzEndTxnCommit(f *testing.F) {
	for v := int16(0); v <= 5; v++ {
		f.Add(endTxnFrame(f, v, true))
		f.Add(endTxnFrame(f, v, false))
	}
	f.Fuzz(func(t *testing.T, frame []byte) {
		committed, ok := EndTxnCommit(frame)
		req, err := Decode(frame)
		if err != nil {
			return
		}
		et, isEndTxn := req.(*kmsg.EndTxnRequest)
		if !isEndTxn || et.Version < 0 || et.Version > 5 {
			return
		}
		// Whatever kmsg reads in full, the hand parser reads the same.
		if !ok || committed != et.Commit {
			t.Fatalf("kmsg reads commit=%v, EndTxnCommit = %v, %v", et.Commit, committed, ok)
		}
	})
}
