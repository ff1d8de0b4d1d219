package main

// Secured listeners for both libraries, from the flags compat_tests/clients/security.py go_options gives:
//   --security-protocol SSL|SASL_PLAINTEXT|SASL_SSL  --ssl-ca FILE (PEM CA to trust)
//   --sasl-mechanism PLAIN|SCRAM-SHA-256|SCRAM-SHA-512|OAUTHBEARER
//   --sasl-username U --sasl-password P  |  --sasl-oauth-token JWS
// Each library's own TLS and SASL code does the work: franz-go's pkg/sasl mechanisms, sarama's Net.TLS
// and Net.SASL (with xdg-go/scram as its SCRAM client, as sarama's own example does).

import (
	"crypto/sha256"
	"crypto/sha512"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"hash"
	"os"

	"github.com/IBM/sarama"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/sasl/oauth"
	"github.com/twmb/franz-go/pkg/sasl/plain"
	franzscram "github.com/twmb/franz-go/pkg/sasl/scram"
	"github.com/xdg-go/scram"
)

type security struct {
	protocol, mechanism, username, password, token string
	tls                                             *tls.Config
}

func securityFrom(a *args) security {
	s := security{
		protocol:  a.str("security-protocol", "PLAINTEXT"),
		mechanism: a.str("sasl-mechanism", ""),
		username:  a.str("sasl-username", ""),
		password:  a.str("sasl-password", ""),
		token:     a.str("sasl-oauth-token", ""),
	}
	switch s.protocol {
	case "PLAINTEXT", "SASL_PLAINTEXT":
	case "SSL", "SASL_SSL":
		pem, err := os.ReadFile(a.must("ssl-ca"))
		if err != nil {
			usage(fmt.Sprintf("--ssl-ca: %v", err))
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			usage("--ssl-ca: no PEM certificate in the file")
		}
		s.tls = &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}
	default:
		usage("unknown --security-protocol " + s.protocol)
	}
	if s.sasl() {
		switch s.mechanism {
		case "PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512", "OAUTHBEARER":
		default:
			usage("unknown --sasl-mechanism " + s.mechanism)
		}
	}
	return s
}

func (s security) sasl() bool { return s.protocol == "SASL_PLAINTEXT" || s.protocol == "SASL_SSL" }

// franzOpts: kgo.DialTLSConfig sets ServerName to the dialed host when it is empty.
func (s security) franzOpts() []kgo.Opt {
	var opts []kgo.Opt
	if s.tls != nil {
		opts = append(opts, kgo.DialTLSConfig(s.tls.Clone()))
	}
	if s.sasl() {
		switch s.mechanism {
		case "PLAIN":
			opts = append(opts, kgo.SASL(plain.Auth{User: s.username, Pass: s.password}.AsMechanism()))
		case "SCRAM-SHA-256":
			opts = append(opts, kgo.SASL(franzscram.Auth{User: s.username, Pass: s.password}.AsSha256Mechanism()))
		case "SCRAM-SHA-512":
			opts = append(opts, kgo.SASL(franzscram.Auth{User: s.username, Pass: s.password}.AsSha512Mechanism()))
		case "OAUTHBEARER":
			opts = append(opts, kgo.SASL(oauth.Auth{Token: s.token}.AsMechanism()))
		}
	}
	return opts
}

func (s security) applySarama(config *sarama.Config) {
	if s.tls != nil {
		config.Net.TLS.Enable = true
		config.Net.TLS.Config = s.tls.Clone()
	}
	if !s.sasl() {
		return
	}
	config.Net.SASL.Enable = true
	config.Net.SASL.Handshake = true
	config.Net.SASL.User = s.username
	config.Net.SASL.Password = s.password
	switch s.mechanism {
	case "PLAIN":
		config.Net.SASL.Mechanism = sarama.SASLTypePlaintext
	case "SCRAM-SHA-256":
		config.Net.SASL.Mechanism = sarama.SASLTypeSCRAMSHA256
		config.Net.SASL.SCRAMClientGeneratorFunc = func() sarama.SCRAMClient { return &xdgSCRAM{hash: sha256.New} }
	case "SCRAM-SHA-512":
		config.Net.SASL.Mechanism = sarama.SASLTypeSCRAMSHA512
		config.Net.SASL.SCRAMClientGeneratorFunc = func() sarama.SCRAMClient { return &xdgSCRAM{hash: sha512.New} }
	case "OAUTHBEARER":
		config.Net.SASL.Mechanism = sarama.SASLTypeOAuth
		config.Net.SASL.TokenProvider = staticToken(s.token)
	}
}

// xdgSCRAM is sarama's SCRAMClient on xdg-go/scram (sarama ships the interface, not a client).
type xdgSCRAM struct {
	hash         func() hash.Hash
	conversation *scram.ClientConversation
}

func (x *xdgSCRAM) Begin(userName, password, authzID string) error {
	client, err := scram.HashGeneratorFcn(x.hash).NewClient(userName, password, authzID)
	if err != nil {
		return err
	}
	x.conversation = client.NewConversation()
	return nil
}

func (x *xdgSCRAM) Step(challenge string) (string, error) { return x.conversation.Step(challenge) }

func (x *xdgSCRAM) Done() bool { return x.conversation.Done() }

type staticToken string

func (t staticToken) Token() (*sarama.AccessToken, error) { return &sarama.AccessToken{Token: string(t)}, nil }
