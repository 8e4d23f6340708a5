package main

import (
	"context"
	"encoding/json"
	"fmt"
	"text/tabwriter"

	"github.com/reinhq/rein"
	"github.com/reinhq/rein/client"
)

const approvalsSynopsis = "rein approvals [--server URL] [--token T] [--status pending|answered|expired] [--limit N] [--json]\n" +
	"       rein approvals [--server URL] [--token T] --allow TOOL_USE_ID\n" +
	"       rein approvals [--server URL] [--token T] --deny TOOL_USE_ID [--message TEXT]"

const approvalsAbout = `Lists the tool calls waiting for your approval across all your sessions,
newest first: the call's id, when it asked, when it expires (if it does), its
session (and title), its run, the tool and its input. --status answered lists
the calls you answered, --status expired those denied because no one answered
in time.

--allow ID runs the call; --deny ID denies it (the run goes on, and the model
sees the denial, with --message as its reason). The answer goes to the call's
own session. A call already answered, expired, or whose run has ended cannot
be answered again: rein approvals says so and exits 1.`

func cmdApprovals(ctx context.Context, args []string, std stdio) error {
	fs := newFlagSet(std, "approvals", approvalsSynopsis, approvalsAbout)
	r := addRemote(fs)
	status := fs.String("status", "pending", "which calls to list (`STATUS`): pending, answered or expired")
	limit := fs.Int("limit", 100, "list at most `N` calls (at most 1000)")
	jsonOut := fs.Bool("json", false, "print each call's JSON on its own line")
	allow := fs.String("allow", "", "approve the call with this tool use `ID`: it runs")
	deny := fs.String("deny", "", "deny the call with this tool use `ID`: it does not run, and the run goes on")
	message := fs.String("message", "", "with --deny, the reason the model is told (`TEXT`)")
	if err := fs.parse(args, std.lookupEnv); err != nil {
		return err
	}
	if err := fs.noArgs(); err != nil {
		return err
	}
	switch {
	case *allow != "" && *deny != "":
		return usagef("give --allow or --deny, not both")
	case *message != "" && *deny == "":
		return usagef("--message goes with --deny: it is the reason the model is told")
	case *status != "pending" && *status != "answered" && *status != "expired":
		return usagef("--status must be pending, answered or expired, not %q", *status)
	case *limit < 1:
		return usagef("--limit must be a positive number, e.g. 100")
	}
	if err := r.connect(); err != nil {
		return err
	}
	if *allow != "" || *deny != "" {
		id := *allow + *deny
		return answerApproval(ctx, r, std, id, *allow != "", *message)
	}
	page, err := r.c.ListConfirmations(ctx, client.ConfirmationListOptions{Status: *status, Limit: min(*limit, 1000)})
	if err != nil {
		return r.fail(err, "")
	}
	if *jsonOut {
		enc := json.NewEncoder(std.out)
		for _, c := range page.Confirmations {
			if err := enc.Encode(c); err != nil {
				return err
			}
		}
		return nil
	}
	if len(page.Confirmations) == 0 {
		fmt.Fprintf(std.err, "no %s approvals\n", *status)
		return nil
	}
	tw := tabwriter.NewWriter(std.out, 0, 4, 2, ' ', 0)
	switch *status {
	case "pending":
		fmt.Fprintln(tw, "TOOL USE ID\tASKED\tEXPIRES\tSESSION\tRUN\tTOOL\tINPUT")
	default:
		fmt.Fprintln(tw, "TOOL USE ID\tASKED\tANSWER\tANSWERED\tSESSION\tRUN\tTOOL\tINPUT")
	}
	for _, c := range page.Confirmations {
		sess := c.SessionID
		if c.SessionTitle != "" {
			sess += " (" + listTitle(c.SessionTitle) + ")"
		}
		input := listTitle(string(c.Input))
		switch *status {
		case "pending":
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\n", c.ToolUseID, when(&c.CreatedAt), when(c.ExpiresAt), sess, c.RunID, c.Name, input)
		default:
			answer := "denied"
			switch {
			case c.Status == "expired":
				answer = "expired"
			case c.Allow != nil && *c.Allow:
				answer = "allowed"
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", c.ToolUseID, when(&c.CreatedAt), answer, when(c.AnsweredAt), sess, c.RunID, c.Name, input)
		}
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if page.Next != "" {
		fmt.Fprintf(std.err, "more than %d; raise --limit to see more\n", len(page.Confirmations))
	}
	return nil
}

// answerApproval answers the pending call id in its own session, found in
// the inbox.
func answerApproval(ctx context.Context, r *remote, std stdio, id string, allow bool, message string) error {
	var found *client.Confirmation
	for after := ""; found == nil; {
		page, err := r.c.ListConfirmations(ctx, client.ConfirmationListOptions{Limit: 1000, After: after})
		if err != nil {
			return r.fail(err, "")
		}
		for i := range page.Confirmations {
			if page.Confirmations[i].ToolUseID == id {
				found = &page.Confirmations[i]
				break
			}
		}
		if page.Next == "" {
			break
		}
		after = page.Next
	}
	if found == nil {
		return &remoteError{msg: fmt.Sprintf("no call %s waits for your approval (rein approvals --status answered or expired lists the others)", id),
			err: &client.Error{Code: rein.CodeNotFound}}
	}
	res, err := r.c.ConfirmTool(ctx, found.SessionID, client.ToolConfirmation{ToolUseID: id, Allow: allow, DenyMessage: message})
	if err != nil {
		return r.fail(err, found.SessionID)
	}
	verb := "denied"
	if res.Allow {
		verb = "allowed"
	}
	fmt.Fprintf(std.out, "%s %s %s in session %s (run %s)\n", verb, found.Name, id, found.SessionID, found.RunID)
	return nil
}
