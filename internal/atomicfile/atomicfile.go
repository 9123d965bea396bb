// Package atomicfile replaces files so that a crash leaves either the old
// content or the new, never a mix, and never a file with a laxer mode than
// asked: the keeper's CA and certificates, the agent's key and identity.
package atomicfile

import (
	"fmt"
	"os"
	"path/filepath"
)

// Write replaces path with data at mode: a temporary file in the same
// directory, given the final mode before anything is written, synced,
// then renamed into place.
func Write(path string, data []byte, mode os.FileMode) error { return write(path, data, mode, true) }

// Replace is Write without the sync: a reader never sees a partial file
// and a crash of the writing process loses nothing, but a crash of the
// machine may (the agent's spool, whose entries a reboot makes void
// anyway, and which pays an fsync's milliseconds per command otherwise).
func Replace(path string, data []byte, mode os.FileMode) error { return write(path, data, mode, false) }

func write(path string, data []byte, mode os.FileMode, sync bool) error {
	tmp, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+"-*")
	if err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	defer os.Remove(tmp.Name())
	if err := tmp.Chmod(mode); err != nil {
		tmp.Close()
		return fmt.Errorf("write %s: %w", path, err)
	}
	if _, err := tmp.Write(data); err != nil {
		tmp.Close()
		return fmt.Errorf("write %s: %w", path, err)
	}
	if sync {
		if err := tmp.Sync(); err != nil {
			tmp.Close()
			return fmt.Errorf("write %s: %w", path, err)
		}
	}
	if err := tmp.Close(); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	return nil
}
