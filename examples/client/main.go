// Command client starts pybox over stdio with mcp-go's client, lists its
// tools, runs code that prints and plots, prints the four fields, and saves
// the images it gets back.
//
//	go run ./examples/client -pybox /usr/local/bin/pybox -out /tmp/pybox-images
package main

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"flag"
	"fmt"
	"log"
	"os"
	"path/filepath"
	"time"

	"github.com/mark3labs/mcp-go/client"
	"github.com/mark3labs/mcp-go/mcp"
)

const demo = `import matplotlib.pyplot as plt
import numpy as np
x = np.linspace(0, 2 * np.pi, 100)
plt.plot(x, np.sin(x))
plt.title("sin(x)")
plt.show()
print("mean of sin over a period:", round(float(np.sin(x).mean()), 6))
`

func main() {
	pybox := flag.String("pybox", "pybox", "the pybox binary")
	code := flag.String("code", demo, "the Python code to run")
	out := flag.String("out", ".", "where to save the images that come back")
	flag.Parse()

	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	c, err := client.NewStdioMCPClient(*pybox, nil)
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()
	init := mcp.InitializeRequest{}
	init.Params.ProtocolVersion = mcp.LATEST_PROTOCOL_VERSION
	init.Params.ClientInfo = mcp.Implementation{Name: "pybox-example", Version: "1"}
	if _, err := c.Initialize(ctx, init); err != nil {
		log.Fatal(err)
	}
	tools, err := c.ListTools(ctx, mcp.ListToolsRequest{})
	if err != nil {
		log.Fatal(err)
	}
	for _, t := range tools.Tools {
		fmt.Println("tool:", t.Name)
	}

	req := mcp.CallToolRequest{}
	req.Params.Name = "run_python"
	req.Params.Arguments = map[string]any{"code": *code}
	res, err := c.CallTool(ctx, req)
	if err != nil {
		log.Fatal(err)
	}
	var fields struct {
		Stdout        string  `json:"stdout"`
		Stderr        string  `json:"stderr"`
		ExitCode      int     `json:"exit_code"`
		ExecutionTime float64 `json:"execution_time"`
		Error         string  `json:"error"`
	}
	b, _ := json.Marshal(res.StructuredContent)
	if err := json.Unmarshal(b, &fields); err != nil {
		log.Fatal(err)
	}
	fmt.Printf("stdout: %q\nstderr: %q\nexit_code: %d\nexecution_time: %.3fs\n", fields.Stdout, fields.Stderr, fields.ExitCode, fields.ExecutionTime)
	if fields.Error != "" {
		fmt.Println("error:", fields.Error)
	}
	n := 0
	for _, content := range res.Content {
		img, ok := content.(mcp.ImageContent)
		if !ok {
			continue
		}
		data, err := base64.StdEncoding.DecodeString(img.Data)
		if err != nil {
			log.Fatal(err)
		}
		n++
		path := filepath.Join(*out, fmt.Sprintf("image_%d.png", n))
		if err := os.WriteFile(path, data, 0o644); err != nil {
			log.Fatal(err)
		}
		fmt.Printf("image: %s (%s, %d bytes)\n", path, img.MIMEType, len(data))
	}
	if fields.ExitCode != 0 {
		os.Exit(fields.ExitCode)
	}
}
