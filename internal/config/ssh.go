package config

import (
	"fmt"
	"time"
)

// SSH configures the connections the keeper keeps to souls across runs.
// A connection is keyed by address, user, pinned host key and client key;
// each run re-checks a warm connection's host key before its first use
// (docs/performance.md, "Warm connections").
type SSH struct {
	// IdleTimeout closes a connection no command has used for that long
	// (a Go duration; default 60s).
	IdleTimeout Duration `yaml:"idle_timeout"`
	// MaxIdle caps the connections kept open with no command on them
	// (default 1000); past it the least recently used are closed.
	MaxIdle int `yaml:"max_idle"`
	// Executor says how a connection runs its plain commands: "auto"
	// (the default) through the soul binary the keeper serves
	// (agent_binary), started on the host once per connection (soul exec
	// --stdio) and uploaded once where it is missing, falling back to a
	// shell per command where it cannot run; "off": a shell per command.
	Executor string `yaml:"executor"`
	// HostKeyRecheck is how long a warm connection's proof of its soul's
	// pinned host key holds for later runs (a Go duration, at most 1h):
	// the default 0 checks it (a TCP connect and key exchange with the
	// soul's sshd) at each run's first use of the connection, so a host
	// whose key changed is refused at the next run; a duration such as 1m
	// checks at most that often per connection, and a key change is
	// refused within it. A fan-out over many souls spends half its time on
	// these checks (docs/performance.md).
	HostKeyRecheck Duration `yaml:"host_key_recheck"`
}

func (s SSH) withDefaults() SSH {
	orDefault(&s.IdleTimeout, 60*time.Second)
	if s.MaxIdle == 0 {
		s.MaxIdle = 1000
	}
	if s.Executor == "" {
		s.Executor = "auto"
	}
	return s
}

func (s SSH) validate() error {
	if err := positive("ssh.idle_timeout", s.IdleTimeout, 0, "60s"); err != nil {
		return err
	}
	if s.MaxIdle < 1 {
		return fmt.Errorf("ssh.max_idle: %d must be at least 1 (default 1000)", s.MaxIdle)
	}
	if s.Executor != "auto" && s.Executor != "off" {
		return fmt.Errorf("ssh.executor: %q is neither auto nor off", s.Executor)
	}
	if s.HostKeyRecheck < 0 || s.HostKeyRecheck.Std() > time.Hour {
		return fmt.Errorf("ssh.host_key_recheck: %s is not a duration from 0 (every run) to 1h, such as 1m", s.HostKeyRecheck)
	}
	return nil
}
