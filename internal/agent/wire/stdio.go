package wire

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
)

// The stdio form of the protocol: what the keeper and `soul exec --stdio`
// say over one SSH session. The messages are the bus's (ExecRequest,
// CancelRequest, output parts, ExecEnd); where NATS has a subject, a frame
// has a kind and the command's id:
//
//	uint32  length of what follows (big endian)
//	byte    kind (Frame*)
//	byte    length of the id, then the id
//	...     the body: JSON of the message, or an output part's raw bytes
//
// The executor first writes StdioHello, a line, so that the keeper can
// tell it from a shell's error (a binary that cannot run) before it reads
// frames.
const (
	FrameExec   byte = 'x' // keeper -> soul: ExecRequest
	FrameCancel byte = 'c' // keeper -> soul: CancelRequest
	FrameStdout byte = 'o' // soul -> keeper: an output part of command id
	FrameStderr byte = 'e'
	FrameEnd    byte = 'z' // soul -> keeper: ExecEnd of command id
)

// StdioHello starts the executor's output: "soulstack-exec 1 <pid>\n".
const StdioHello = "soulstack-exec 1"

// MaxFrame bounds one frame either way: an exec request carries its stdin
// (the keeper's own bound on a command's input), an output part at most
// ChunkSize bytes.
const MaxFrame = 64 << 20

// ErrFrame means a frame that breaks the framing: too long, or cut short.
var ErrFrame = errors.New("bad stdio frame")

// WriteFrame writes one frame. It is not safe for concurrent use: callers
// hold a lock around it.
func WriteFrame(w io.Writer, kind byte, id string, body []byte) error {
	if len(id) > 255 {
		return fmt.Errorf("%w: id of %d bytes", ErrFrame, len(id))
	}
	n := 2 + len(id) + len(body)
	if n > MaxFrame {
		return fmt.Errorf("%w: %d bytes, at most %d", ErrFrame, n, MaxFrame)
	}
	buf := make([]byte, 4+n)
	binary.BigEndian.PutUint32(buf, uint32(n))
	buf[4], buf[5] = kind, byte(len(id))
	copy(buf[6:], id)
	copy(buf[6+len(id):], body)
	_, err := w.Write(buf)
	return err
}

// ReadFrame reads one frame of at most max bytes (MaxFrame when max is 0
// or more). io.EOF means the stream ended between frames.
func ReadFrame(r io.Reader, max int) (kind byte, id string, body []byte, err error) {
	if max <= 0 || max > MaxFrame {
		max = MaxFrame
	}
	var head [4]byte
	if _, err := io.ReadFull(r, head[:]); err != nil {
		if errors.Is(err, io.ErrUnexpectedEOF) {
			err = fmt.Errorf("%w: cut short", ErrFrame)
		}
		return 0, "", nil, err
	}
	n := int(binary.BigEndian.Uint32(head[:]))
	if n < 2 || n > max {
		return 0, "", nil, fmt.Errorf("%w: %d bytes, at most %d", ErrFrame, n, max)
	}
	buf := make([]byte, n)
	if _, err := io.ReadFull(r, buf); err != nil {
		return 0, "", nil, fmt.Errorf("%w: cut short: %v", ErrFrame, err)
	}
	idLen := int(buf[1])
	if 2+idLen > n {
		return 0, "", nil, fmt.Errorf("%w: id past the frame", ErrFrame)
	}
	return buf[0], string(buf[2 : 2+idLen]), buf[2+idLen:], nil
}
