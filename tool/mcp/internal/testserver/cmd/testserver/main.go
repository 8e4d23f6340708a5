// Command testserver serves package testserver's tools as an MCP server on
// stdin/stdout, for the end-to-end tests of package mcp, plus the
// misbehaviours a separate process can show: exiting mid-call (crash),
// writing garbage mid-call (garble) or from the start (-garbage), and not
// starting at all until a file exists (-require).
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/reinhq/rein/tool/mcp/internal/testserver"
)

func main() {
	name := flag.String("name", "testserver", "server name")
	garbage := flag.Bool("garbage", false, "print a line that is not JSON instead of speaking MCP, then wait for stdin to close")
	require := flag.String("require", "", "exit 1 at once unless this file exists")
	flag.Parse()

	if *require != "" {
		if _, err := os.Stat(*require); err != nil {
			fmt.Fprintf(os.Stderr, "testserver: not ready: %v\n", err)
			os.Exit(1)
		}
	}
	if *garbage {
		fmt.Println("hello, I am not JSON-RPC")
		_, _ = io.Copy(io.Discard, os.Stdin)
		return
	}
	fmt.Fprintf(os.Stderr, "testserver %s: pid %d ready\n", *name, os.Getpid())
	s := testserver.New(*name, testserver.Options{
		Exit:   func() { os.Exit(3) },
		Garble: func() { fmt.Println("{this is not json") },
	})
	if err := s.Run(context.Background(), &mcp.StdioTransport{}); err != nil {
		fmt.Fprintf(os.Stderr, "testserver: %v\n", err)
		os.Exit(1)
	}
}
