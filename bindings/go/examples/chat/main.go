// chat answers one prompt with a model's chat template, streaming the reply as it is decoded.
//
//	go run ./examples/chat MODEL "What is the capital of France?"
package main

import (
	"fmt"
	"os"

	"packlm"
)

func main() {
	if len(os.Args) != 3 {
		fmt.Fprintln(os.Stderr, "usage: chat MODEL PROMPT")
		os.Exit(2)
	}
	if err := chat(os.Args[1], os.Args[2], 128); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}

func chat(path, prompt string, maxTokens int) error {
	model, err := packlm.Open(path, nil)
	if err != nil {
		return err
	}
	defer model.Close()
	text, err := model.ChatApply([]packlm.ChatMessage{{Role: "user", Content: prompt}}, true)
	if err != nil {
		return err
	}
	ids, err := model.Tokenize(text, packlm.TokenizeAddSpecial|packlm.TokenizeParseSpecial)
	if err != nil {
		return err
	}
	stops, err := model.StopTokens()
	if err != nil {
		return err
	}
	session, err := model.NewSession(nil)
	if err != nil {
		return err
	}
	defer session.Close()
	stream, err := model.NewDetokenizer(packlm.DetokenizeSkipSpecial)
	if err != nil {
		return err
	}
	defer stream.Close()

	logits, err := session.StepBatch(ids, packlm.WantLast) // the prompt in one pass
	if err != nil {
		return err
	}
	for i := 0; i < maxTokens; i++ {
		token := uint32(packlm.Argmax(logits)) // greedy
		if contains(stops, token) {
			break
		}
		piece, err := stream.Feed(token)
		if err != nil {
			return err
		}
		fmt.Print(piece)
		if logits, err = session.Step(token); err != nil {
			return err
		}
	}
	rest, err := stream.Flush()
	if err != nil {
		return err
	}
	fmt.Println(rest)
	return nil
}

func contains(ids []uint32, id uint32) bool {
	for _, x := range ids {
		if x == id {
			return true
		}
	}
	return false
}
