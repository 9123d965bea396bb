package mcp

import (
	"fmt"
	"io"
	"net/http"
	"sync"
)

// inProcess is an http.RoundTripper that serves each request with the
// Operator API's handler in this process, streaming the answer (event
// streams included) through a pipe: the MCP tools call the REST API this
// way, so that they go through its authentication, RBAC, validation,
// audit and masking, with no second implementation of any of them.
type inProcess struct {
	h http.Handler
	// remoteAddr is the MCP client's address, which the API's
	// failed-authentication budget counts against.
	remoteAddr string
}

func (t inProcess) RoundTrip(req *http.Request) (*http.Response, error) {
	sreq := req.Clone(req.Context())
	sreq.RemoteAddr = t.remoteAddr
	sreq.RequestURI = req.URL.RequestURI()
	if sreq.Body == nil {
		sreq.Body = http.NoBody
	}
	pr, pw := io.Pipe()
	w := &pipeWriter{header: http.Header{}, pw: pw, started: make(chan struct{})}
	go func() {
		defer func() {
			// As net/http does, a panicking handler fails its request, not
			// the keeper.
			if v := recover(); v != nil {
				w.WriteHeader(http.StatusInternalServerError)
				_ = pw.CloseWithError(fmt.Errorf("the API handler panicked: %v", v))
				return
			}
			w.WriteHeader(http.StatusOK) // a handler that wrote nothing answered 200
			_ = pw.Close()
		}()
		t.h.ServeHTTP(w, sreq)
	}()
	select {
	case <-w.started:
	case <-req.Context().Done():
		_ = pr.CloseWithError(req.Context().Err())
		return nil, req.Context().Err()
	}
	return &http.Response{
		Status: http.StatusText(w.status), StatusCode: w.status, Proto: "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1,
		Header: w.sent, Body: pr, ContentLength: -1, Request: req,
	}, nil
}

// pipeWriter is the handler's http.ResponseWriter: the status and header
// are the response's once written, the body goes into the pipe.
type pipeWriter struct {
	header  http.Header
	pw      *io.PipeWriter
	once    sync.Once
	status  int
	sent    http.Header // the header as it was when the status was written
	started chan struct{}
}

func (w *pipeWriter) Header() http.Header { return w.header }

func (w *pipeWriter) WriteHeader(code int) {
	w.once.Do(func() {
		w.status = code
		// The reader gets its own copy: the handler may go on touching
		// its map.
		w.sent = w.header.Clone()
		close(w.started)
	})
}

func (w *pipeWriter) Write(b []byte) (int, error) {
	w.WriteHeader(http.StatusOK)
	return w.pw.Write(b)
}

// Flush is a no-op: every Write reaches the reader as it happens.
func (w *pipeWriter) Flush() {}
