// Package audit defines the hash-chained audit log: the event record, how
// each event's hash covers the previous one, and the verifier that finds an
// edited, deleted or reordered row.
package audit

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"strconv"
	"time"
)

// GenesisHash is the prev_hash of the first event in a chain.
const GenesisHash = "0000000000000000000000000000000000000000000000000000000000000000"

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
type Head struct {
	Seq  int64
	Hash string
}

// Normalize truncates t to the precision every backend stores (microseconds)
// in UTC, so that the hash computed on write matches the row read back.
func Normalize(t time.Time) time.Time { return t.UTC().Truncate(time.Microsecond) }

// ComputeHash returns the hex SHA-256 over the event's fields and the
// previous event's hash. Every field is length-prefixed, so no two
// different events hash the same input.
func ComputeHash(e Event) string {
	h := sha256.New()
	for _, f := range []string{
		strconv.FormatInt(e.Seq, 10),
		Normalize(e.At).Format(time.RFC3339Nano),
		e.ActorAID, e.Action, e.Object, e.Payload, e.PrevHash,
	} {
		fmt.Fprintf(h, "%d:%s;", len(f), f)
	}
	return hex.EncodeToString(h.Sum(nil))
}

// Seal fills in e's sequence number, previous hash and hash so that it
// follows head, and returns the new head.
func Seal(e *Event, head Head) Head {
	e.Seq = head.Seq + 1
	e.At = Normalize(e.At)
	e.PrevHash = head.Hash
	if e.Seq == 1 {
		e.PrevHash = GenesisHash
	}
	e.Hash = ComputeHash(*e)
	return Head{Seq: e.Seq, Hash: e.Hash}
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
