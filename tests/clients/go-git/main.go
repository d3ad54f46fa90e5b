// Command go-git-client drives go-git (github.com/go-git/go-git/v5) for packd's client matrix
// test (crates/packd/tests/clients.rs): the same four operations as the other drivers.
//
//	go-git-client clone URL DIR       a bare clone
//	go-git-client shallow URL DIR     a bare clone of depth 1
//	go-git-client fetch DIR           fetch from origin
//	go-git-client push DIR REFSPEC    push REFSPEC to origin
//
// Any error, and any ref the server refuses, exits 1 with the reason on stderr.
package main

import (
	"errors"
	"fmt"
	"os"

	git "github.com/go-git/go-git/v5"
	"github.com/go-git/go-git/v5/config"
)

func run(args []string) error {
	if len(args) < 2 {
		return errors.New("usage: go-git-client clone|shallow|fetch|push ARGS")
	}
	switch op := args[0]; op {
	case "clone", "shallow":
		if len(args) != 3 {
			return fmt.Errorf("usage: go-git-client %s URL DIR", op)
		}
		opts := &git.CloneOptions{URL: args[1]}
		if op == "shallow" {
			opts.Depth = 1
		}
		_, err := git.PlainClone(args[2], true, opts)
		return err
	case "fetch":
		repo, err := git.PlainOpen(args[1])
		if err != nil {
			return err
		}
		err = repo.Fetch(&git.FetchOptions{RemoteName: "origin"})
		if errors.Is(err, git.NoErrAlreadyUpToDate) {
			return errors.New("fetch found nothing new")
		}
		return err
	case "push":
		if len(args) != 3 {
			return errors.New("usage: go-git-client push DIR REFSPEC")
		}
		repo, err := git.PlainOpen(args[1])
		if err != nil {
			return err
		}
		return repo.Push(&git.PushOptions{
			RemoteName: "origin",
			RefSpecs:   []config.RefSpec{config.RefSpec(args[2])},
		})
	default:
		return fmt.Errorf("unknown operation %q", op)
	}
}

func main() {
	if err := run(os.Args[1:]); err != nil {
		fmt.Fprintf(os.Stderr, "go-git-client: %v\n", err)
		os.Exit(1)
	}
}
