package main

// How commands fail. A command returns an error; mainWith turns it into the
// exit status and what stderr says, in one place, so that every command
// reports alike: 2 and the usage line for a command line rein cannot act
// on, 1 and one line "rein: <message>" for anything else, and the
// documented statuses of rein run and rein send for how a run ended.

import (
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"

	"github.com/reinhq/rein"
	"github.com/reinhq/rein/client"
)

// Exit statuses (docs/cli.md).
const (
	exitOK          = 0
	exitFailed      = 1
	exitUsage       = 2
	exitInterrupted = 3
	exitTimeout     = 4
	exitCancelled   = 130
)

// usageError is a command line rein cannot act on: a bad flag value, a
// missing or extra argument. Its message says what was wrong and what a
// valid value looks like; mainWith adds the command's usage line and exits
// with status 2.
type usageError struct {
	msg string
	// located: msg is FILE:LINE: reason lines (a configuration file's
	// problems), printed as they are so that editors and scripts find
	// them at the start of a line.
	located bool
}

func (e *usageError) Error() string { return e.msg }

// usagef builds a usageError.
func usagef(format string, args ...any) error {
	return &usageError{msg: fmt.Sprintf(format, args...)}
}

// exitError ends a command with a given exit status: how a run ended
// (rein run and rein send), or 0 once help was printed. err, when set, is
// reported like any other error; nil means the command has already said
// everything there is to say (a failed run's status line, say).
type exitError struct {
	code int
	err  error
}

func (e *exitError) Error() string {
	if e.err != nil {
		return e.err.Error()
	}
	return fmt.Sprintf("exit status %d", e.code)
}

func (e *exitError) Unwrap() error { return e.err }

// errHelpShown ends a command whose help was asked for (-h) and printed.
var errHelpShown error = &exitError{code: exitOK}

// exitStatus reports a command's error on w and returns the process exit
// status. synopsis is the command's usage line ("rein send [flags] TEXT").
func exitStatus(name, synopsis string, err error, w io.Writer) int {
	if err == nil {
		return exitOK
	}
	var ue *usageError
	if errors.As(err, &ue) {
		if ue.located {
			fmt.Fprintln(w, ue.msg)
		} else {
			fmt.Fprintln(w, "rein: "+ue.msg)
		}
		fmt.Fprintln(w, "usage: "+synopsis)
		if name != "help" {
			fmt.Fprintf(w, "('rein help %s' describes every flag)\n", name)
		}
		return exitUsage
	}
	code := exitFailed
	var ee *exitError
	if errors.As(err, &ee) {
		if ee.err == nil {
			return ee.code
		}
		code, err = ee.code, ee.err
	}
	fmt.Fprintln(w, "rein: "+message(err))
	return code
}

// message renders an error for people, on one line. Rein's errors state
// their code first ("invalid_argument: …") for programs; a person reads the
// message, so a local error shows its message alone and a server's answer
// shows its code once, at the end: "session ses_x not found (not_found)".
func message(err error) string {
	s := err.Error()
	var ce *client.Error
	if errors.As(err, &ce) {
		s = strings.Replace(s, ce.Error(), clientMessage(ce), 1)
	} else {
		var re *rein.Error
		if errors.As(err, &re) {
			s = strings.Replace(s, re.Error(), reinMessage(re), 1)
		}
	}
	return strings.Join(strings.Fields(strings.ReplaceAll(s, "\n", "; ")), " ")
}

// reinMessage is a local *rein.Error without its code; its cause is added
// only when the message does not already say it.
func reinMessage(re *rein.Error) string {
	msg := re.Message
	switch {
	case msg == "" && re.Err != nil:
		// rein.Errorf left its cause out of a message it could not
		// complete without it: here, for the operator, the cause says it.
		return message(re.Err)
	case msg == "":
		msg = string(re.Code)
	}
	if re.Err != nil {
		if cause := message(re.Err); !strings.Contains(msg, cause) {
			msg += ": " + cause
		}
	}
	return msg
}

// clientMessage is an error answer of a server: its message, then its
// code (and the offending field) once.
func clientMessage(ce *client.Error) string {
	msg := ce.Message
	if msg == "" || msg == string(ce.Code) {
		msg = http.StatusText(ce.Status)
	}
	if ce.Param != "" {
		return fmt.Sprintf("%s (%s at %s)", msg, ce.Code, ce.Param)
	}
	return fmt.Sprintf("%s (%s)", msg, ce.Code)
}
