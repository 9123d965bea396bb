// Package ssh is the agentless transport: it reaches souls over SSH with
// golang.org/x/crypto/ssh and runs commands on them.
//
// A Target names a host, a user, an in-memory private key and, once known,
// the host key pinned in the soul's registry row. Host keys are trusted on
// first use: with nothing pinned, the presented key is accepted and handed
// to Options.OnNewHostKey for the caller to pin; with a key pinned, any other
// key fails with ErrHostKeyMismatch and is never accepted silently.
// Connecting follows the target's RetryPolicy (3 attempts 10 s apart by
// default, for VMs still booting) and ends in ErrUnreachable; a rejected key
// is ErrAuth at once. Code maps these to the dotted codes runs report.
//
// A Pool holds one connection per target for a whole run and dials each
// host once however many goroutines ask for it; a target is its address,
// user, pinned host key and client key, so a connection is never shared
// with a target holding another pin or other credentials. Client.Exec runs
// an argv (quoted with Quote for the remote POSIX shell) or a shell script,
// with stdin, environment variables sent on stdin ahead of the command's
// own input (never in a command line another user could read), a working
// directory, and sudo -n when the user is not root; every command runs
// with LC_ALL=C.
// A non-zero exit status is a Result, not an error.
//
// Key material and environment values never appear in errors or logs.
package ssh
