package main

import (
	"context"
	"fmt"
	"strings"
)

// MaxAttempts is how many times the agent runs code before it gives up.
const MaxAttempts = 3

// BestEstimate marks an answer that no successful run backs.
const BestEstimate = "BEST ESTIMATE (not verified: the code failed 3 times)"

// Reply is what the model answers: code to run, or the final answer.
type Reply struct {
	Code   string
	Answer string
}

// Model is the language model. Next gets the question first, then the raw
// result of each run (the tool's whole JSON, traceback and all); final is
// true when the model must answer without more code.
type Model interface {
	Next(ctx context.Context, input string, final bool) (Reply, error)
}

// Result is a run_python result's four fields and error kind.
type Result struct {
	Stdout        string  `json:"stdout"`
	Stderr        string  `json:"stderr"`
	ExitCode      int     `json:"exit_code"`
	ExecutionTime float64 `json:"execution_time"`
	Error         string  `json:"error,omitempty"`
}

// Runner runs code through pybox and returns the tool's raw JSON.
type Runner interface {
	Run(ctx context.Context, code string) (raw string, res Result, err error)
}

// Outcome is what the agent did.
type Outcome struct {
	Answer   string
	Attempts int
	Verified bool
}

// Answer runs the run-read-fix loop: the model writes code, pybox runs it,
// a failure goes back to the model whole, and after MaxAttempts failures
// the model must answer with a marked best estimate.
func Answer(ctx context.Context, m Model, r Runner, question string) (Outcome, error) {
	input := question
	var out Outcome
	for {
		reply, err := m.Next(ctx, input, out.Attempts >= MaxAttempts)
		if err != nil {
			return out, err
		}
		if reply.Code == "" || out.Attempts >= MaxAttempts {
			out.Answer = strings.TrimSpace(reply.Answer)
			if !out.Verified {
				out.Answer = BestEstimate + ": " + out.Answer
			}
			return out, nil
		}
		out.Attempts++
		raw, res, err := r.Run(ctx, reply.Code)
		if err != nil {
			return out, fmt.Errorf("running code: %w", err)
		}
		ok := res.ExitCode == 0 && res.Error == ""
		out.Verified = out.Verified || ok
		switch {
		case ok:
			input = "The code ran. Its result:\n" + raw + "\nAnswer the question with the exact figure."
		case out.Attempts < MaxAttempts:
			input = fmt.Sprintf("The code failed (attempt %d of %d). Its whole result:\n%s\nFix the code and run it again.", out.Attempts, MaxAttempts, raw)
		default:
			input = fmt.Sprintf("The code failed %d times. Its last result:\n%s\nDo not run more code: give your best estimate.", MaxAttempts, raw)
		}
	}
}
