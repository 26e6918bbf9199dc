package main

import (
	"errors"
	"fmt"
	"os"
	"strings"

	"github.com/hashicorp/go-hclog"
	"github.com/spf13/cobra"

	"github.com/rollout/rollout/fsm"
	"github.com/rollout/rollout/raftnode"
)

// recoverCmd is "rollout-coord recover": the offline way back after a
// cluster has lost its quorum for good (see docs/RECOVERY.md).
func recoverCmd() *cobra.Command {
	var id, data, peersPath, logLevel string
	cmd := &cobra.Command{
		Use:   "recover --data DIR --peers FILE [--id ID]",
		Short: "Rewrite a stopped replica's Raft configuration after quorum is lost for good",
		Long: "recover runs offline on the data directory of a stopped replica and replaces its Raft\n" +
			"configuration with the voters named in the peers file, a JSON array such as\n" +
			"  [{\"id\":\"c1\",\"raft_addr\":\"10.0.0.1:7001\"}]\n" +
			"(hashicorp/raft's RecoverCluster, as Consul's peers.json). The replica's ledger is kept:\n" +
			"its snapshot and every entry of its log (committed or not) are replayed into a new snapshot\n" +
			"that carries the new configuration. Run it, with the same peers file, on the data directory\n" +
			"of every replica named in the file, then start those replicas with their data directories\n" +
			"and no --bootstrap or --join. See docs/RECOVERY.md before using it.",
		Args:          cobra.NoArgs,
		SilenceUsage:  true,
		SilenceErrors: true,
		RunE: func(cmd *cobra.Command, _ []string) error {
			var missing []string
			for _, f := range []struct{ name, v string }{{"--data", data}, {"--peers", peersPath}} {
				if f.v == "" {
					missing = append(missing, f.name)
				}
			}
			if len(missing) > 0 {
				return fmt.Errorf("recover: missing required flags: %s", strings.Join(missing, ", "))
			}
			if st, err := os.Stat(data); err != nil || !st.IsDir() {
				return fmt.Errorf("recover: --data %s is not a directory: %v", data, err)
			}
			recorded, ok, err := raftnode.RecordedID(data)
			if err != nil {
				return fmt.Errorf("recover: %w", err)
			}
			switch {
			case id == "" && !ok:
				return fmt.Errorf("recover: --data %s records no replica id: give --id", data)
			case id == "":
				id = recorded
			case ok && id != recorded:
				return fmt.Errorf("recover: --data %s belongs to replica %q, not --id %q", data, recorded, id)
			}
			if err := raftnode.ValidateServerID(id); err != nil {
				return fmt.Errorf("recover: --id: %w", err)
			}
			peers, err := raftnode.ReadPeersFile(peersPath)
			if err != nil {
				return fmt.Errorf("recover: %w", err)
			}
			self := false
			for _, p := range peers {
				self = self || p.ID == id
			}
			if !self {
				return fmt.Errorf("recover: peers file %s does not name this replica %q: every replica recovered must be one of the voters", peersPath, id)
			}
			ledger, err := fsm.New(fsm.DefaultConfig())
			if err != nil {
				return err
			}
			rc := raftnode.DefaultConfig()
			rc.ID, rc.DataDir = id, data
			rc.FatalResult = corruptEntry
			rc.Logger = hclog.New(&hclog.LoggerOptions{Name: "recover." + id, Level: hclog.LevelFromString(logLevel), Output: cmd.ErrOrStderr()})
			if err := raftnode.Recover(rc, ledger, peers); err != nil {
				if errors.Is(err, raftnode.ErrInvalidArgument) {
					return fmt.Errorf("recover: peers file %s: %w", peersPath, err)
				}
				return fmt.Errorf("recover: %w", err)
			}
			var names []string
			for _, p := range peers {
				names = append(names, p.ID+" at "+p.RaftAddr)
			}
			fmt.Fprintf(cmd.OutOrStdout(), "recovered %s: the Raft configuration is now %d voter(s): %s\n", data, len(peers), strings.Join(names, ", "))
			fmt.Fprintf(cmd.OutOrStdout(), "start replica %s with --data %s and no --bootstrap or --join\n", id, data)
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&id, "id", "", "this replica's id, as it ran (default: the id --data records; must be in the peers file)")
	f.StringVar(&data, "data", "", "the stopped replica's data directory (required)")
	f.StringVar(&peersPath, "peers", "", "JSON file with the voters of the recovered cluster (required)")
	f.StringVar(&logLevel, "log-level", "warn", "trace, debug, info, warn or error")
	return cmd
}
