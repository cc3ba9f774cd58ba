// Command agent answers a question by having Claude write Python that
// pybox runs: run, read the whole traceback, fix, retry, at most three
// times, then a clearly marked best estimate.
//
//	ANTHROPIC_API_KEY=... go run ./examples/agent -pybox /usr/local/bin/pybox \
//	    "What is the standard deviation of the first 1000 primes?"
package main

import (
	"context"
	"flag"
	"fmt"
	"log"
	"os"
	"strings"
	"time"

	"github.com/anthropics/anthropic-sdk-go"
)

func main() {
	pybox := flag.String("pybox", "pybox", "the pybox binary")
	model := flag.String("model", "claude-sonnet-4-5", "the Claude model")
	flag.Parse()
	question := strings.Join(flag.Args(), " ")
	if question == "" {
		question = "What is the standard deviation of the first 1000 primes?"
	}
	if os.Getenv("ANTHROPIC_API_KEY") == "" {
		log.Fatal("set ANTHROPIC_API_KEY")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	runner, err := startPybox(ctx, *pybox, nil)
	if err != nil {
		log.Fatal(err)
	}
	defer runner.Close()
	m := &claude{client: anthropic.NewClient(), model: anthropic.Model(*model)}
	out, err := Answer(ctx, m, runner, question)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Printf("%s\n(%d run(s) of code)\n", out.Answer, out.Attempts)
}
