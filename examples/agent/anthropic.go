package main

import (
	"context"
	"encoding/json"
	"errors"
	"strings"

	"github.com/anthropics/anthropic-sdk-go"
)

// claude is the Model on Anthropic's Messages API, with run_python as its
// one tool. It keeps the conversation: each input after the question is
// the result of the tool call it asked for.
type claude struct {
	client   anthropic.Client
	model    anthropic.Model
	messages []anthropic.MessageParam
	pending  string // the id of the tool call awaiting its result
}

const system = "Answer the user's question. Use the run_python tool to compute exact figures; print what you need. If the code fails, read the whole traceback, fix the code and run it again. When you have the figure, answer in one short sentence."

func (c *claude) Next(ctx context.Context, input string, final bool) (Reply, error) {
	switch {
	case len(c.messages) == 0:
		c.messages = append(c.messages, anthropic.NewUserMessage(anthropic.NewTextBlock(input)))
	case c.pending != "":
		failed := strings.Contains(input, "failed")
		c.messages = append(c.messages, anthropic.NewUserMessage(anthropic.NewToolResultBlock(c.pending, input, failed)))
		c.pending = ""
	default:
		c.messages = append(c.messages, anthropic.NewUserMessage(anthropic.NewTextBlock(input)))
	}
	params := anthropic.MessageNewParams{
		Model:     c.model,
		MaxTokens: 2048,
		System:    []anthropic.TextBlockParam{{Text: system}},
		Messages:  c.messages,
	}
	if !final {
		params.Tools = []anthropic.ToolUnionParam{{OfTool: &anthropic.ToolParam{
			Name:        "run_python",
			Description: anthropic.String("Run Python 3 code (numpy, pandas, scipy, sympy installed) in a sandbox; returns stdout, stderr, exit_code and execution_time."),
			InputSchema: anthropic.ToolInputSchemaParam{
				Properties: map[string]any{"code": map[string]any{"type": "string", "description": "Python source"}},
				Required:   []string{"code"},
			},
		}}}
	}
	msg, err := c.client.Messages.New(ctx, params)
	if err != nil {
		return Reply{}, err
	}
	c.messages = append(c.messages, msg.ToParam())
	var text strings.Builder
	for _, block := range msg.Content {
		switch b := block.AsAny().(type) {
		case anthropic.TextBlock:
			text.WriteString(b.Text)
		case anthropic.ToolUseBlock:
			var in struct {
				Code string `json:"code"`
			}
			if err := json.Unmarshal(b.Input, &in); err != nil {
				return Reply{}, err
			}
			c.pending = b.ID
			return Reply{Code: in.Code}, nil
		}
	}
	if text.Len() == 0 {
		return Reply{}, errors.New("the model answered with neither text nor a tool call")
	}
	return Reply{Answer: text.String()}, nil
}
