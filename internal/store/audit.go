package store

import "encoding/json"

// AuditListParams pages through the audit log in sequence order.
type AuditListParams struct {
	Limit    int
	AfterSeq int64
	// Project, when set, keeps the events about that project.
	Project string
}

// AuditParams records an event that goes with no registry change, such as
// a refused host key.
type AuditParams struct {
	Actor   Actor
	Action  string
	Object  string
	Payload any
	// Project is the project the event is about; empty for keeper-wide.
	Project string
}

// Audited is a mutation's audit event as its transaction wrote it (the
// payload masked), told to the store's follow-ups (sqlstore.WithFollowUps)
// inside that transaction.
type Audited struct {
	Action, Object, Project string
	Payload                 json.RawMessage
}
