package keyed

import (
	"errors"

	"github.com/kordproject/kord/checkpoint"
	"github.com/kordproject/kord/serde"
)

// State schema evolution. A state whose codec is a serde.Resolver (the
// Avro serdes, and kord's wrappers of one: listCodec, sessionCodec,
// stampedCodec) records its writer schema with its fingerprint
// (checkpoint.OperatorRef's ValueSchema, and KeySchema for a map's user
// keys). A restore that finds the checkpoint's fingerprint differs from
// this code's resolves the checkpoint's schemas against this code's, by the
// codec's rules (Avro's schema resolution), before it decodes a value:
// either every value of the state is read under the checkpoint's schema
// and converted to this code's, or the restore is refused, naming the
// state and the field. A state without a recorded schema (another codec,
// or metadata older than format 4) must have the same fingerprint, as
// before. What is written after the restore is written under this code's
// schema, and the next checkpoint records it.

// resolveFunc returns the fingerprint that a state's values written under
// the checkpoint's schemas carry, and their decoder. Its error is a
// *MismatchError without Operator and State, or another error.
type resolveFunc[T any] func(ref checkpoint.OperatorRef) (fingerprint string, dec func([]byte) (T, error), err error)

// writerSchema is c's writer schema when c is a serde.Resolver, else "".
func writerSchema[T any](c serde.Serde[T]) string {
	if r, ok := c.(serde.Resolver[T]); ok {
		return r.WriterSchema()
	}
	return ""
}

// resolveCodec returns the fingerprint of c's values written under writer,
// and a codec that decodes them: c itself when no schema was recorded
// (writer is "") or c is no Resolver, so that only the fingerprints decide.
// part names the values in a refusal ("key" and "value" for a map's, ""
// for the state's own).
func resolveCodec[T any](c serde.Serde[T], writer, part string) (string, serde.Serde[T], error) {
	fp, rc, err := resolveInner(c, writer)
	if err != nil {
		return "", nil, &MismatchError{Field: "schema", Part: part, Err: err}
	}
	return fp, rc, nil
}

// resolveInner is resolveCodec with the codec's own error: what a
// wrapper's Resolve returns.
func resolveInner[T any](c serde.Serde[T], writer string) (string, serde.Serde[T], error) {
	r, ok := c.(serde.Resolver[T])
	if !ok || writer == "" {
		return c.Fingerprint(), c, nil
	}
	fp, dec, err := r.Resolve(writer)
	if err != nil {
		return "", nil, err
	}
	return fp, decodeWith[T]{Serde: c, dec: dec}, nil
}

// decodeWith is a codec whose Decode is dec: a resolved decoder.
type decodeWith[T any] struct {
	serde.Serde[T]
	dec func([]byte) (T, error)
}

func (d decodeWith[T]) Decode(b []byte) (T, error) { return d.dec(b) }

// valueResolve is the resolveFunc of a state of one codec, c, whose
// values are c's (a value state) or made of c's by decode (a list).
func valueResolve[T, E any](c serde.Serde[E], decode func(b []byte, c serde.Serde[E]) (T, error)) resolveFunc[T] {
	return func(ref checkpoint.OperatorRef) (string, func([]byte) (T, error), error) {
		fp, rc, err := resolveCodec(c, ref.ValueSchema, "")
		if err != nil {
			return "", nil, err
		}
		return fp, func(b []byte) (T, error) { return decode(b, rc) }, nil
	}
}

// mapResolve is the resolveFunc of a map state of key codec kc and value
// codec vc.
func mapResolve[K comparable, V any](kc serde.Serde[K], vc serde.Serde[V]) resolveFunc[map[K]V] {
	return func(ref checkpoint.OperatorRef) (string, func([]byte) (map[K]V, error), error) {
		kfp, rk, err := resolveCodec(kc, ref.KeySchema, "key")
		if err != nil {
			return "", nil, err
		}
		vfp, rv, err := resolveCodec(vc, ref.ValueSchema, "value")
		if err != nil {
			return "", nil, err
		}
		return mapFingerprint(kfp, vfp), func(b []byte) (map[K]V, error) { return decodeMap(b, rk, rv) }, nil
	}
}

func mapFingerprint(key, value string) string { return "key=" + key + ";value=" + value }

func decodeOne[T any](b []byte, c serde.Serde[T]) (T, error) { return c.Decode(b) }

// evolve makes s a state whose schemas may change across a restore:
// resolve reads the checkpoint's values, and the state records its codecs'
// writer schemas.
func (s *store[T]) evolve(keySchema, valueSchema string, resolve resolveFunc[T]) {
	s.inf.KeySchema, s.inf.ValueSchema = keySchema, valueSchema
	s.resolve = resolve
}

// decoderFor returns the decoder of the state's values in a checkpoint
// that recorded the state as ref: the state's own when the fingerprints
// are equal; when they are not, a decoder that resolves the checkpoint's
// schemas against this code's, if both recorded theirs and the rules allow
// it. Otherwise it returns a *MismatchError: Field "fingerprint", or
// "schema" naming the field that cannot be read.
func (s *store[T]) decoderFor(ref checkpoint.OperatorRef) (func([]byte) (T, error), error) {
	if ref.SchemaFingerprint == s.inf.Fingerprint {
		return s.dec, nil
	}
	mismatch := &MismatchError{Operator: s.inf.Operator, State: s.inf.Name, Field: "fingerprint", Want: s.inf.Fingerprint, Found: ref.SchemaFingerprint}
	if s.resolve == nil || ref.KeySchema == "" && ref.ValueSchema == "" || s.inf.KeySchema == "" && s.inf.ValueSchema == "" {
		return nil, mismatch
	}
	fp, dec, err := s.resolve(ref)
	var me *MismatchError
	if errors.As(err, &me) {
		me.Operator, me.State, me.Want, me.Found = s.inf.Operator, s.inf.Name, s.inf.Fingerprint, ref.SchemaFingerprint
		return nil, me
	}
	if err != nil {
		return nil, err
	}
	if fp != ref.SchemaFingerprint {
		// The recorded schemas resolve, but this code with them would not
		// have written the checkpoint's fingerprint: the state's shape
		// changed (a TTL gained or lost, a codec of another format).
		return nil, mismatch
	}
	return dec, nil
}
