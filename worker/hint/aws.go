package hint

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/rollout/rollout/worker"
)

// AWS instance metadata (IMDSv2) paths and headers.
const (
	DefaultAWSBaseURL = "http://169.254.169.254"
	AWSTokenPath      = "/latest/api/token"
	AWSActionPath     = "/latest/meta-data/spot/instance-action"
	AWSTokenTTLHeader = "X-aws-ec2-metadata-token-ttl-seconds"
	AWSTokenHeader    = "X-aws-ec2-metadata-token"
)

// AWS defaults.
const (
	// DefaultAWSPollInterval is how often instance-action is read (AWS
	// recommends every 5 seconds).
	DefaultAWSPollInterval = 5 * time.Second
	// DefaultAWSTokenTTL is the session token lifetime asked for (the
	// maximum IMDSv2 allows).
	DefaultAWSTokenTTL = 6 * time.Hour
	// DefaultRequestTimeout bounds one metadata request that is not a long
	// poll.
	DefaultRequestTimeout = 2 * time.Second
)

// AWSConfig configures the EC2 spot interruption hint.
type AWSConfig struct {
	// BaseURL is the instance metadata service (DefaultAWSBaseURL); tests
	// point it at a fake.
	BaseURL string
	// PollInterval is the time between two reads of instance-action.
	PollInterval time.Duration
	// TokenTTL is the IMDSv2 session token lifetime asked for (1s..6h).
	TokenTTL time.Duration
	// RequestTimeout bounds each HTTP request.
	RequestTimeout time.Duration
	// Lead is the notice EC2 promises (AWSNoticeLead) and Budget the drain
	// deadline targeted (AWSDrainBudget). A notice read with less than Lead
	// left before its time gets a proportionally shorter budget, so the
	// margin keeps its share.
	Lead, Budget time.Duration
	// Client makes the requests; nil means a client that never uses a
	// proxy.
	Client *http.Client
	// Logger receives the hint's logs; nil discards them.
	Logger hclog.Logger
}

// DefaultAWSConfig returns the production configuration.
func DefaultAWSConfig() AWSConfig {
	return AWSConfig{
		BaseURL:        DefaultAWSBaseURL,
		PollInterval:   DefaultAWSPollInterval,
		TokenTTL:       DefaultAWSTokenTTL,
		RequestTimeout: DefaultRequestTimeout,
		Lead:           AWSNoticeLead,
		Budget:         AWSDrainBudget,
	}
}

// Validate reports the first problem with c, naming the field.
func (c AWSConfig) Validate() error {
	return firstError(
		checkBaseURL("BaseURL", c.BaseURL),
		checkAtLeast("PollInterval", c.PollInterval, time.Millisecond),
		checkTokenTTL(c.TokenTTL),
		checkPositive("RequestTimeout", c.RequestTimeout),
		checkBudget(c.Budget, c.Lead),
	)
}

// checkTokenTTL requires a token lifetime IMDSv2 grants: 1s..6h.
func checkTokenTTL(ttl time.Duration) error {
	if ttl < time.Second || ttl > 6*time.Hour {
		return fmt.Errorf("%w: TokenTTL must be in 1s..6h, got %v", ErrInvalidConfig, ttl)
	}
	return nil
}

// AWS watches the EC2 instance metadata service for a spot interruption
// notice: it takes an IMDSv2 session token (PUT /latest/api/token) and polls
// GET /latest/meta-data/spot/instance-action with it. 404 means no notice;
// 200 carries {"action": "terminate"|"stop"|"hibernate", "time": RFC 3339}.
type AWS struct {
	watcher
	cfg AWSConfig
}

var _ worker.ComputeHint = (*AWS)(nil)

// NewAWS returns an AWS hint for cfg.
func NewAWS(cfg AWSConfig) (*AWS, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	return &AWS{watcher: newWatcher(cfg.Client, cfg.Logger, "hint-aws"), cfg: cfg}, nil
}

// Watch polls until a notice is read (delivered once; then the channel
// closes) or ctx ends. Metadata errors are logged and retried at the next
// poll. It may be called once.
func (a *AWS) Watch(ctx context.Context) (<-chan worker.Notice, error) {
	var token string // the IMDSv2 session token, taken on the first poll
	return a.start(ctx, pollSpec{
		what:   "spot interruption notice",
		notice: "spot interruption notice",
		url:    a.cfg.BaseURL,
		every:  a.cfg.PollInterval,
		read:   func(ctx context.Context) (*worker.Notice, error) { return a.check(ctx, &token) },
	})
}

// check reads instance-action once (taking a token first when *token is
// empty, and once more when the token was refused). It returns nil without
// error when there is no notice.
func (a *AWS) check(ctx context.Context, token *string) (*worker.Notice, error) {
	for try := 0; ; try++ {
		if *token == "" {
			t, err := a.fetchToken(ctx)
			if err != nil {
				return nil, err
			}
			*token = t
		}
		code, body, err := a.get(ctx, *token)
		if err != nil {
			return nil, err
		}
		switch code {
		case http.StatusNotFound:
			return nil, nil
		case http.StatusOK:
			return a.parse(body, time.Now())
		case http.StatusUnauthorized:
			*token = "" // expired or revoked
			if try == 0 {
				continue
			}
		}
		return nil, fmt.Errorf("%w: GET %s: HTTP %d", ErrBadResponse, AWSActionPath, code)
	}
}

func (a *AWS) fetchToken(ctx context.Context) (string, error) {
	resp, body, err := a.fetch(ctx, a.cfg.RequestTimeout, http.MethodPut, strings.TrimRight(a.cfg.BaseURL, "/")+AWSTokenPath,
		"IMDSv2 token", AWSTokenTTLHeader, strconv.Itoa(int(a.cfg.TokenTTL/time.Second)))
	if err != nil {
		return "", err
	}
	if resp.StatusCode != http.StatusOK {
		return "", fmt.Errorf("%w: PUT %s: HTTP %d", ErrBadResponse, AWSTokenPath, resp.StatusCode)
	}
	t := strings.TrimSpace(string(body))
	if t == "" {
		return "", fmt.Errorf("%w: PUT %s: empty token", ErrBadResponse, AWSTokenPath)
	}
	return t, nil
}

func (a *AWS) get(ctx context.Context, token string) (int, []byte, error) {
	resp, body, err := a.fetch(ctx, a.cfg.RequestTimeout, http.MethodGet, strings.TrimRight(a.cfg.BaseURL, "/")+AWSActionPath,
		"GET "+AWSActionPath, AWSTokenHeader, token)
	if resp == nil {
		return 0, nil, err
	}
	return resp.StatusCode, body, err
}

// awsAction is the body of spot/instance-action.
type awsAction struct {
	Action string `json:"action"`
	Time   string `json:"time"`
}

// parse turns an instance-action body read at now into a notice.
func (a *AWS) parse(body []byte, now time.Time) (*worker.Notice, error) {
	var act awsAction
	if err := json.Unmarshal(body, &act); err != nil {
		return nil, fmt.Errorf("%w: instance-action is not JSON: %v", ErrBadResponse, err)
	}
	switch act.Action {
	case "terminate", "stop", "hibernate":
	default:
		return nil, fmt.Errorf("%w: instance-action has action %q (want terminate, stop or hibernate)", ErrBadResponse, act.Action)
	}
	terminate, err := time.Parse(time.RFC3339, act.Time)
	if err != nil {
		// The notice stands; assume the full lead.
		a.log.Warn("instance-action time unreadable; assuming the full notice", "time", act.Time, "lead", a.cfg.Lead)
		terminate = now.Add(a.cfg.Lead)
	}
	if act.Action == "hibernate" {
		// Hibernation starts at once; there is no two-minute warning.
		terminate = now
	}
	return &worker.Notice{
		Provider:  worker.ProviderAWS,
		Reason:    fmt.Sprintf("EC2 spot instance-action %q at %s", act.Action, act.Time),
		Received:  now,
		Terminate: terminate,
		Deadline:  drainDeadline(now, terminate, a.cfg.Lead, a.cfg.Budget),
	}, nil
}

// drainDeadline is the drain deadline for a notice received at now for a
// machine going at terminate: Budget after now, or, when less than Lead is
// left, the same share of what is left (never before now).
func drainDeadline(now, terminate time.Time, lead, budget time.Duration) time.Time {
	left := terminate.Sub(now)
	if left <= 0 {
		return now
	}
	share := time.Duration(float64(left) * float64(budget) / float64(lead))
	return now.Add(min(budget, share))
}
