package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/signal"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/spf13/cobra"

	"github.com/rollout/rollout/client/coordclient"
	"github.com/rollout/rollout/gateway"
	"github.com/rollout/rollout/internal/connlimit"
	"github.com/rollout/rollout/internal/mtls"
	"github.com/rollout/rollout/internal/telemetry"
)

// gatewayOptions are the flags of rollout gateway.
type gatewayOptions struct {
	listen            string
	coords            []string
	keys              string
	store             string
	maxFileBytes      int64
	maxRequests       int
	window            time.Duration
	maxConnsPerClient int
	logLevel          string
	sweepEvery        time.Duration
	keepRuns          bool
	uploadMinRate     int64
	uploadGrace       time.Duration
	httpsCert         string
	httpsKey          string
	telemetry         telemetry.Flags
}

func (a *app) gatewayCmd() *cobra.Command {
	o := gatewayOptions{}
	cmd := &cobra.Command{
		Use:   "gateway --listen H:P --coord H:P[,...] --keys FILE [--store URL]",
		Short: "Serve the OpenAI Batch API (files, batches) on the cluster, for the OpenAI SDKs",
		Long: "gateway serves OpenAI's Batch API over HTTPS (HTTP with --insecure): /v1/files and\n" +
			"/v1/batches in OpenAI's shapes, so that code written for OpenAI's batch service runs on\n" +
			"this cluster by changing its base URL and key. Each batch is a run of the cluster; files and\n" +
			"the gateway's records live in --store. It is stateless: run as many as you like against one\n" +
			"cluster and store. Requests authenticate with `Authorization: Bearer KEY`, keys from --keys\n" +
			"(`rollout gateway keys add NAME --keys FILE` makes one); SIGHUP reloads the file. Its\n" +
			"certificate (--tls-cert) is its identity to the cluster; it serves HTTPS with --https-cert and\n" +
			"--https-key (by default NAME-https.pem and NAME-https-key.pem beside --tls-cert, which rollout\n" +
			"certs writes for every NAME:gateway; a certificate issued before, valid for server use too,\n" +
			"serves itself). With role gateway (or admin) each key's batches run as the key's name's tenant\n" +
			"(rollout tenant set NAME sets its weight and quotas; a batch past its tenant's --max-queued\n" +
			"is answered 429 as OpenAI answers a full enqueued limit); with role client every batch is\n" +
			"the certificate's own tenant's. Each batch runs at its key's priority.",
		Args: cobra.NoArgs,
	}
	f := cmd.Flags()
	f.StringVar(&o.listen, "listen", "127.0.0.1:8080", "HTTP(S) address to serve on")
	addCoordFlag(cmd, &o.coords)
	f.StringVar(&o.keys, "keys", "", "the keys `FILE`: NAME:SHA256-OF-KEY [priority=N] lines (required; rollout gateway keys add writes it)")
	addStoreFlag(cmd, &o.store)
	f.Int64Var(&o.maxFileBytes, "max-file-bytes", gateway.DefaultMaxFileBytes, "largest upload, in bytes (413 over it)")
	f.IntVar(&o.maxRequests, "max-requests", gateway.DefaultMaxRequests, "most requests in one batch input file (400 over it)")
	f.DurationVar(&o.window, "window-lasts", gateway.DefaultWindow, "how long the completion window \"24h\" lasts (for tests)")
	_ = f.MarkHidden("window-lasts")
	f.DurationVar(&o.sweepEvery, "sweep-every", gateway.DefaultSweepEvery, "how often to move on the batches nobody reads (expiry, output files); 0: only when read")
	f.BoolVar(&o.keepRuns, "keep-runs", false, "keep a finished batch's run in the ledger and its objects in the store (by default they are deleted once its output and error files are written)")
	f.Int64Var(&o.uploadMinRate, "upload-min-rate", gateway.DefaultMinUploadRate, "slowest a request body may arrive, in bytes per second after --upload-grace: a slower upload is cut with 408 (0: no minimum)")
	f.DurationVar(&o.uploadGrace, "upload-grace", gateway.DefaultUploadGrace, "how long a request body may take before --upload-min-rate counts")
	f.IntVar(&o.maxConnsPerClient, "max-conns-per-client", connlimit.DefaultPerIP, "most connections one IP address may hold open; more are closed at once")
	f.StringVar(&o.httpsCert, "https-cert", "", "PEM certificate the HTTPS listener presents (default: NAME-https.pem beside --tls-cert when it exists, else --tls-cert)")
	f.StringVar(&o.httpsKey, "https-key", "", "PEM private key of --https-cert")
	f.StringVar(&o.logLevel, "gateway-log-level", "info", "the gateway's log level (to stderr): trace, debug, info, warn, error")
	o.telemetry.AddFlags(f)
	_ = cmd.MarkFlagRequired("keys")
	cmd.RunE = a.action(func(ctx context.Context, _ *cobra.Command) error { return a.runGateway(ctx, o) })
	cmd.AddCommand(a.gatewayKeysCmd())
	return cmd
}

func (a *app) gatewayKeysCmd() *cobra.Command {
	keys := &cobra.Command{Use: "keys", Short: "Manage the gateway's API keys", Args: cobra.NoArgs}
	var file string
	var priority int
	var ifMissing bool
	add := &cobra.Command{
		Use:   "add NAME --keys FILE [--priority N] [--if-missing]",
		Short: "Make a new API key for NAME: prints it once and appends its SHA-256 to the keys file",
		Long: "add makes a random API key, appends the line NAME:SHA256-OF-KEY to the keys file (created\n" +
			"with mode 0600) and prints the key, which is kept nowhere else. NAME owns the files and\n" +
			"batches its key creates, and is their tenant in the cluster (its weight and quotas are\n" +
			"rollout tenant set NAME's). --priority N (1 lowest to 5 highest; default 3) is the priority\n" +
			"of its batches, written on its line as priority=N (edit the line to change it). Send the\n" +
			"running gateways SIGHUP to load it. NAME may have one key: a second add fails, unless\n" +
			"--if-missing, which then adds and prints nothing and succeeds (a deployment's start-up step).",
		Args: cobra.ExactArgs(1),
	}
	add.Flags().StringVar(&file, "keys", "", "the keys file (required)")
	add.Flags().IntVar(&priority, "priority", gateway.DefaultPriority, "the priority of the key's batches, 1 (lowest) to 5 (highest)")
	add.Flags().BoolVar(&ifMissing, "if-missing", false, "when NAME already has a key in the file, add nothing and succeed (say so on stderr)")
	_ = add.MarkFlagRequired("keys")
	add.RunE = func(_ *cobra.Command, args []string) error {
		a.started = true
		if err := gateway.CheckPriority(priority); err != nil {
			return usagef("--priority: %v", err)
		}
		opts := gateway.KeyOptions{}
		if priority != gateway.DefaultPriority {
			// The default is written as no setting: the line reads the
			// same to a gateway of before priorities.
			opts.Priority = priority
		}
		key, err := gateway.AddKeyWith(file, args[0], opts)
		if ifMissing && errors.Is(err, gateway.ErrKeyExists) {
			fmt.Fprintf(a.stderr, "%q already has a key in %s: nothing added (--if-missing)\n", args[0], file)
			return nil
		}
		if err != nil {
			return err
		}
		fmt.Fprintln(a.stdout, key)
		fmt.Fprintf(a.stderr, "key for %q added to %s (shown only now; send running gateways SIGHUP)\n", args[0], file)
		return nil
	}
	keys.AddCommand(add)
	return keys
}

func (a *app) runGateway(ctx context.Context, o gatewayOptions) error {
	lvl := hclog.LevelFromString(o.logLevel)
	if lvl == hclog.NoLevel {
		return usagef("--gateway-log-level %q is not one of trace, debug, info, warn, error", o.logLevel)
	}
	log := hclog.New(&hclog.LoggerOptions{Name: "gateway", Level: lvl, Output: a.stderr})
	keys, err := gateway.LoadKeys(o.keys)
	if err != nil {
		return fmt.Errorf("--keys: %w", err)
	}
	if keys.Len() == 0 {
		log.Warn("the keys file holds no key: every request will be refused (401) until a key is added and the gateway gets SIGHUP", "keys_file", o.keys)
	}
	addrs, err := parseCoords(o.coords)
	if err != nil {
		return err
	}
	tlsConf, err := a.tlsConfig()
	if err != nil {
		return err
	}
	perKey, err := checkGatewayRole(a.tlsSrc)
	if err != nil {
		return err
	}
	if !perKey {
		log.Warn("the gateway's certificate has role client: every key's batches are submitted as the certificate's tenant; " +
			"issue it role gateway (rollout certs --names NAME:gateway) so that each key is a tenant of its own (fair share, quotas)")
	}
	ccfg := coordclient.DefaultConfig()
	ccfg.Addrs, ccfg.TLS, ccfg.CallTimeout, ccfg.Logger = addrs, tlsConf, maxCallTimeout, log.Named("client")
	client, err := coordclient.New(ccfg)
	if err != nil {
		return err
	}
	defer client.Close()
	// Without --store or $ROLLOUT_STORE: the cluster's own default
	// directory, so that gateways of two clusters never share their
	// records (gateway/) by default.
	storeURL, err := a.resolveStore(ctx, client, o.store, "")
	if err != nil {
		return err
	}
	st, err := openStore(ctx, storeURL)
	if err != nil {
		return err
	}
	defer st.Close()
	tel, err := telemetry.Start(o.telemetry, log)
	if err != nil {
		return err
	}
	defer tel.Close()
	gcfg := gateway.DefaultConfig()
	if tel.Registry != nil {
		gcfg.Registerer = tel.Registry
	}
	gcfg.Cluster, gcfg.Store, gcfg.Keys, gcfg.Logger = client, st, keys, log
	gcfg.MaxFileBytes, gcfg.MaxRequests, gcfg.Window, gcfg.CallTimeout = o.maxFileBytes, o.maxRequests, o.window, a.timeout
	gcfg.SweepEvery, gcfg.KeepRuns, gcfg.TenantPerKey = o.sweepEvery, o.keepRuns, perKey
	gcfg.MinUploadRate, gcfg.UploadGrace = o.uploadMinRate, o.uploadGrace
	gw, err := gateway.New(gcfg)
	if err != nil {
		return usagef("%v", err)
	}
	defer gw.Close()

	raw, err := net.Listen("tcp", o.listen)
	if err != nil {
		return fmt.Errorf("--listen: %w", err)
	}
	nofile, _, _ := connlimit.FileLimit()
	lim := connlimit.Limits{Name: "gateway", PerIP: o.maxConnsPerClient, Total: connlimit.Share(nofile, 1, 2),
		FirstByteTimeout: connlimit.DefaultFirstByteTimeout, Observer: tel.ConnObserver()}
	var lis net.Listener
	if lis, err = connlimit.New(raw, lim); err != nil {
		raw.Close()
		return err
	}
	scheme := "http"
	var httpsSrc *mtls.Source
	if tlsConf != nil {
		scheme = "https"
		if httpsSrc, err = a.gatewayHTTPSSource(o, log); err != nil {
			lis.Close()
			return err
		}
		lis = tls.NewListener(lis, &tls.Config{
			// The HTTPS certificate, as reloaded in place.
			GetCertificate: httpsSrc.Config().GetCertificate,
			MinVersion:     tls.VersionTLS12,
			ClientAuth:     tls.NoClientCert,
			NextProtos:     []string{"h2", "http/1.1"},
		})
	}
	srv := &http.Server{
		Handler:           gw.Handler(),
		ReadHeaderTimeout: 10 * time.Second,
		IdleTimeout:       2 * time.Minute,
		MaxHeaderBytes:    64 << 10,
		ErrorLog:          log.StandardLogger(&hclog.StandardLoggerOptions{ForceLevel: hclog.Debug}),
	}
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	defer signal.Stop(hup)
	go func() {
		for range hup {
			reloadKeys(log, keys, o.keys)
			if a.tlsSrc != nil {
				log.Info("SIGHUP: reloading the TLS files", "cert", a.tlsSrc.Files().Cert)
				// The source logs through the client logger (--log-level,
				// errors only by default): the gateway's own log says
				// what it serves now.
				if err := a.tlsSrc.Reload(); err != nil {
					log.Error("TLS files not reloaded; the previous certificate, key and CA bundle stay in use", "error", err)
				} else if m := a.tlsSrc.Current(); m != nil {
					log.Info("TLS files reloaded", "cert", a.tlsSrc.Files().Cert, "subject", m.Leaf.Subject.CommonName,
						"serial", mtls.SerialOf(m.Leaf), "not_after", m.Leaf.NotAfter, "cas", len(m.CAs))
				}
			}
			if httpsSrc != nil && httpsSrc.Files().Cert != a.tlsSrc.Files().Cert {
				if err := httpsSrc.Reload(); err != nil {
					log.Error("HTTPS certificate not reloaded; the previous one stays in use", "error", err)
				} else {
					log.Info("HTTPS certificate reloaded", "cert", httpsSrc.Files().Cert, "not_after", httpsSrc.Current().Leaf.NotAfter)
				}
			}
		}
	}()
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(lis) }()
	log.Info("gateway serving the OpenAI Batch API", "url", fmt.Sprintf("%s://%s/v1", scheme, lis.Addr()), "store", st.URL(), "keys", keys.Len())
	fmt.Fprintf(a.stdout, "gateway: %s://%s/v1\n", scheme, lis.Addr())
	select {
	case err := <-errc:
		if !errors.Is(err, http.ErrServerClosed) {
			return err
		}
		return nil
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_ = srv.Shutdown(sctx)
	return nil
}

// reloadKeys reloads the keys file path on SIGHUP (gateway.Keys.Reload's
// rule): an unreadable, bad or blank file is an ERROR naming it, and the
// loaded keys stay; a file that holds no key on purpose (comments only) is
// taken, with a WARN saying that every request is now refused.
func reloadKeys(log hclog.Logger, keys *gateway.Keys, path string) {
	n, err := keys.Reload(path)
	switch {
	case err != nil:
		log.Error("SIGHUP: keys file not reloaded; the previous keys stay", "keys_file", path, "keys", n, "error", err)
	case n == 0:
		log.Warn("SIGHUP: the keys file holds no key: every request is now refused (401) until a key is added and the gateway gets SIGHUP again", "keys_file", path)
	default:
		log.Info("SIGHUP: keys reloaded", "keys_file", path, "keys", n)
	}
}

// checkGatewayRole refuses a certificate whose role cannot submit: the
// gateway would start and then answer every create with the cluster's
// refusal. It reports whether the gateway may submit each key's batches as
// the key's own tenant: a gateway or admin certificate, or none (an
// insecure cluster honours the tenant a run names).
func checkGatewayRole(src *mtls.Source) (bool, error) {
	if src == nil {
		return true, nil
	}
	id, err := mtls.IdentityOf(src.Current().Leaf)
	if err != nil {
		return false, fmt.Errorf("--tls-cert: %w", err)
	}
	switch id.Role {
	case mtls.RoleGateway, mtls.RoleAdmin:
		return true, nil
	case mtls.RoleClient:
		return false, nil
	}
	return false, usagef("--tls-cert %q has role %s: the gateway submits and cancels runs, which needs a gateway certificate (rollout certs --names NAME:gateway; a client certificate submits every key's batches as its own tenant)", id.Name, id.Role)
}

// gatewayHTTPSSource loads the certificate the gateway's HTTPS listener
// presents: --https-cert and --https-key; without them NAME-https.pem and
// NAME-https-key.pem beside --tls-cert NAME.pem when both exist (rollout
// certs writes them for every gateway: server use only); else --tls-cert
// itself, which must then be valid for server use (a certificate issued
// before gateway certificates were made for client use only).
func (a *app) gatewayHTTPSSource(o gatewayOptions, log hclog.Logger) (*mtls.Source, error) {
	if (o.httpsCert == "") != (o.httpsKey == "") {
		return nil, usagef("--https-cert and --https-key must be given together")
	}
	files := mtls.Files{CA: a.tls.CA, Cert: o.httpsCert, Key: o.httpsKey}
	if o.httpsCert == "" {
		files.Cert, files.Key = a.tls.Cert, a.tls.Key
		if base, ok := strings.CutSuffix(a.tls.Cert, ".pem"); ok {
			c, k := base+mtls.HTTPSSuffix+".pem", base+mtls.HTTPSSuffix+"-key.pem"
			if fileExists(c) && fileExists(k) {
				files.Cert, files.Key = c, k
			}
		}
	}
	src, err := files.NewSource(mtls.SourceOptions{Warn: log.Error})
	if err != nil {
		return nil, fmt.Errorf("the HTTPS certificate: %w", err)
	}
	if eku := src.Current().Leaf.ExtKeyUsage; len(eku) > 0 && !slices.Contains(eku, x509.ExtKeyUsageServerAuth) {
		return nil, usagef("%s is not valid for server use (a gateway certificate authenticates to the cluster only): "+
			"give --https-cert and --https-key, or issue the gateway again with rollout certs, which writes NAME-https.pem beside it", files.Cert)
	}
	log.Info("HTTPS certificate", "cert", files.Cert, "subject", src.Current().Leaf.Subject.CommonName, "not_after", src.Current().Leaf.NotAfter)
	return src, nil
}

// fileExists reports whether path names a regular file.
func fileExists(path string) bool {
	st, err := os.Stat(path)
	return err == nil && st.Mode().IsRegular()
}
