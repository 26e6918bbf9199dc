// Package flood is jepsen-lite's flood nemesis: an unauthenticated host
// that floods the leader's ports, then a client certificate that floods
// one connection with concurrent calls. Run does, within one fault's hold,
// three phases:
//
//  1. hold: opens and holds as many connections as it can (at most
//     Config.Conns per port) to every port of the target;
//  2. slowloris: opens at most Config.Slowloris connections (spread over
//     the ports) that each send one byte of a TLS ClientHello per second;
//  3. streams: with Config.TLS (a client certificate), Config.Streams
//     concurrent unary calls over Config.StreamConns connections to the
//     gRPC port.
//
// Every loop is bounded in count (and the counts by the files the process
// may still open, less 1024 left to the rest of it) and stops when its phase, or the context,
// ends; every connection is closed before Run returns. It dials only the
// addresses it is given, from Config.Source when set (a loopback address
// of its own, so that the replica sees a host apart from the harness's
// clients). Stats counts what it tried and what the server did.
package flood
