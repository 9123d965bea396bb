// Package shell quotes words for a POSIX shell. The SSH transport quotes
// every argument it sends with it, and scenarios reach it through the CEL
// function quote(s), so a value spliced into a command line stays one word.
package shell

import "strings"

// Quote returns s quoted for a POSIX shell, so that the shell reads it back
// as exactly one word equal to s. Words made only of characters no shell
// treats specially are returned as they are; anything else is put in single
// quotes, where each single quote of s closes the quoting, is escaped, and
// reopens it. The empty string becomes a pair of quotes:
//
//	/etc/hosts  ->  /etc/hosts
//	it's        ->  'it'\''s'
//	$HOME       ->  '$HOME'
//	(empty)     ->  ''
//
// s must not contain a NUL byte, which no shell word can hold.
func Quote(s string) string {
	if s == "" {
		return "''"
	}
	if isSafeWord(s) {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

// isSafeWord reports whether s has only characters that are literal in
// every position of an unquoted POSIX shell word.
func isSafeWord(s string) bool {
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9':
		case strings.IndexByte("_-+./,:@%", c) >= 0:
		default:
			return false
		}
	}
	return true
}
