// Package audit defines the keyed, hash-chained audit log: the event
// record, how each event's hash covers the previous one under an audit key
// that is not in the database, the signed checkpoints the keeper writes
// outside the database, and the verifier that finds an edited, deleted,
// reordered, truncated or recomputed row.
package audit

import (
	"crypto/hkdf"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"hash"
	"strconv"
	"time"
)

// GenesisHash is the prev_hash of the first event in a chain.
const GenesisHash = "0000000000000000000000000000000000000000000000000000000000000000"

// keyInfo is the HKDF info that derives the audit key from its root (the
// keeper's data key, or the key audit_key_ref names).
const keyInfo = "soulstack audit v1"

// Event is one row of the audit log. Payload is masked JSON text, stored and
// hashed byte for byte.
type Event struct {
	Seq      int64     `json:"seq"`
	At       time.Time `json:"at"`
	ActorAID string    `json:"actor_aid"`
	Action   string    `json:"action"`
	Object   string    `json:"object"`
	Payload  string    `json:"payload"`
	PrevHash string    `json:"prev_hash"`
	Hash     string    `json:"hash"`
}

// Head is the chain's tip as recorded beside the log: the last sequence
// number and its hash. It lets the verifier notice rows deleted from the end.
// KeyedFrom is the first sequence number whose hash is keyed (an HMAC):
// rows before it were written by a keeper without an audit key and carry a
// plain SHA-256 (legacy rows). It is fixed when the database is migrated.
// Missing reports that the database has no head row at all (it was
// deleted outside the keeper); Seq and Hash are then zero.
type Head struct {
	Seq       int64
	Hash      string
	KeyedFrom int64
	Missing   bool
}

// Normalize truncates t to the precision every backend stores (microseconds)
// in UTC, so that the hash computed on write matches the row read back.
func Normalize(t time.Time) time.Time { return t.UTC().Truncate(time.Microsecond) }

// writeFields writes the event's fields and the previous event's hash to h,
// each length-prefixed, so that no two different events give the same input.
func writeFields(h hash.Hash, e Event) {
	for _, f := range []string{
		strconv.FormatInt(e.Seq, 10),
		Normalize(e.At).Format(time.RFC3339Nano),
		e.ActorAID, e.Action, e.Object, e.Payload, e.PrevHash,
	} {
		fmt.Fprintf(h, "%d:%s;", len(f), f)
	}
}

// LegacyHash returns the plain, unkeyed SHA-256 of the event that keepers
// wrote before the audit key existed. Anyone with write access to the
// database can recompute it. Legacy rows are covered only through the first
// keyed row, whose HMAC includes the last legacy row's hash: they are shown
// to be what the database held when the chain was first keyed, and nothing
// about what happened to them before.
func LegacyHash(e Event) string {
	h := sha256.New()
	writeFields(h, e)
	return hex.EncodeToString(h.Sum(nil))
}

// Key is the audit key: every row's hash is an HMAC-SHA256 under it, and
// checkpoints are signed with it. It is derived once, at start, and never
// stored in the database.
type Key struct {
	mac []byte
}

// DeriveKey returns the audit key derived from root (32 bytes or more):
// HKDF-SHA256 with info "soulstack audit v1".
func DeriveKey(root []byte) (*Key, error) {
	if len(root) < 32 {
		return nil, errors.New("audit key: the root key must have at least 32 bytes")
	}
	k, err := hkdf.Key(sha256.New, root, nil, keyInfo, 32)
	if err != nil {
		return nil, fmt.Errorf("derive audit key: %w", err)
	}
	return &Key{mac: k}, nil
}

// Hash returns the hex HMAC-SHA256 under k over the event's length-prefixed
// fields and the previous event's hash.
func (k *Key) Hash(e Event) string {
	h := hmac.New(sha256.New, k.mac)
	writeFields(h, e)
	return hex.EncodeToString(h.Sum(nil))
}

// Seal fills in e's sequence number, previous hash and keyed hash so that it
// follows head, and returns the new head.
func (k *Key) Seal(e *Event, head Head) Head {
	e.Seq = head.Seq + 1
	e.At = Normalize(e.At)
	e.PrevHash = head.Hash
	if e.Seq == 1 {
		e.PrevHash = GenesisHash
	}
	e.Hash = k.Hash(*e)
	return Head{Seq: e.Seq, Hash: e.Hash, KeyedFrom: head.KeyedFrom}
}

// MarshalPayload returns the compact JSON text of an (already masked) payload.
func MarshalPayload(v any) (string, error) {
	if v == nil {
		return "{}", nil
	}
	b, err := json.Marshal(v)
	if err != nil {
		return "", fmt.Errorf("marshal audit payload: %w", err)
	}
	return string(b), nil
}
