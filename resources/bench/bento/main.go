// Command bento is Bento (github.com/warpstreamlabs/bento, a fork of
// Benthos) with its pure, io (the file output) and Kafka components, for resources/bench's
// "bento" variant: its kafka_franz input is what a user of Bento would pick
// to read a topic. It is a module of its own, so that the project's module
// does not depend on Bento; resources/bench builds it when the variant is
// selected:
//
//	go build -C resources/bench/bento -o /tmp/bento .
package main

import (
	"context"

	_ "github.com/warpstreamlabs/bento/public/components/io"
	_ "github.com/warpstreamlabs/bento/public/components/kafka"
	_ "github.com/warpstreamlabs/bento/public/components/prometheus"
	_ "github.com/warpstreamlabs/bento/public/components/pure"
	"github.com/warpstreamlabs/bento/public/service"
)

func main() {
	service.RunCLI(context.Background(), service.CLIOptSetBinaryName("bento"))
}
