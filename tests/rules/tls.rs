//! A connection dropped during the TLS handshake is a transient connect failure,
//! safe for every method; a certificate failure stays never curable. Against a
//! real rustls server on 127.0.0.1.

use std::future::Future;
use std::io;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use backstop::policy::{AttemptOutcome, ErrorKind, NoRetry, StopReason};
use backstop::{ReplayBody, RetryLayer, RetryPolicy};
use bytes::Bytes;
use http::{Method, Request, Response, Uri};
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper_rustls::HttpsConnector;
use hyper_util::client::legacy::connect::{Connected, Connection, HttpConnector};
use hyper_util::client::legacy::Client;
use hyper_util::rt::{TokioExecutor, TokioIo};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio_rustls::rustls::pki_types::{
    CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer, ServerName,
};
use tokio_rustls::rustls::{self, ClientConfig, RootCertStore, ServerConfig};
use tower::{Layer, Service, ServiceExt};

type Body = Full<Bytes>;

fn provider() -> Arc<rustls::crypto::CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

fn certificate() -> (CertificateDer<'static>, PrivateKeyDer<'static>) {
    let rcgen::CertifiedKey { cert, key_pair } =
        rcgen::generate_simple_self_signed(vec!["localhost".to_owned(), "127.0.0.1".to_owned()])
            .unwrap();
    let key = PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(key_pair.serialize_der()));
    (cert.der().clone(), key)
}

/// A TLS server whose first `cut` connections are dropped in the handshake, after
/// the client's hello arrived; the others are served `200 OK` over HTTP/1.1.
struct TlsServer {
    addr: SocketAddr,
    cert: CertificateDer<'static>,
    connections: Arc<AtomicUsize>,
    served: Arc<AtomicUsize>,
}

async fn tls_server(cut: usize) -> TlsServer {
    let (cert, key) = certificate();
    let config = ServerConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_no_client_auth()
        .with_single_cert(vec![cert.clone()], key)
        .unwrap();
    let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(config));
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let connections = Arc::new(AtomicUsize::new(0));
    let served = Arc::new(AtomicUsize::new(0));
    let (c, s) = (connections.clone(), served.clone());
    tokio::spawn(async move {
        loop {
            let Ok((mut tcp, _)) = listener.accept().await else {
                return;
            };
            let n = c.fetch_add(1, Ordering::SeqCst);
            let acceptor = acceptor.clone();
            let served = s.clone();
            tokio::spawn(async move {
                if n < cut {
                    // Read the client's hello, then close: the handshake ends in EOF.
                    let mut hello = [0u8; 4096];
                    let _ = tcp.read(&mut hello).await;
                    return;
                }
                let Ok(tls) = acceptor.accept(tcp).await else {
                    return;
                };
                let service =
                    hyper::service::service_fn(move |req: Request<hyper::body::Incoming>| {
                        let served = served.clone();
                        async move {
                            let _ = req.into_body().collect().await;
                            served.fetch_add(1, Ordering::SeqCst);
                            Ok::<_, io::Error>(Response::new(Full::new(Bytes::from_static(b"ok"))))
                        }
                    });
                let _ = hyper::server::conn::http1::Builder::new()
                    .serve_connection(TokioIo::new(tls), service)
                    .await;
            });
        }
    });
    TlsServer {
        addr,
        cert,
        connections,
        served,
    }
}

/// A TLS stream that hyper-util's client can use.
struct Tls(tokio_rustls::client::TlsStream<TcpStream>);

impl AsyncRead for Tls {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.0).poll_read(cx, buf)
    }
}

impl AsyncWrite for Tls {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.0).poll_write(cx, buf)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.0).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.0).poll_shutdown(cx)
    }
}

impl Connection for Tls {
    fn connected(&self) -> Connected {
        Connected::new()
    }
}

/// Connects over TCP, then TLS with `roots`, for any URI's authority.
#[derive(Clone)]
struct TlsConnector(Arc<ClientConfig>);

impl TlsConnector {
    fn trusting(cert: CertificateDer<'static>) -> Self {
        TlsConnector(Arc::new(client_config(cert)))
    }
}

/// A client configuration that trusts `cert` only.
fn client_config(cert: CertificateDer<'static>) -> ClientConfig {
    let mut roots = RootCertStore::empty();
    roots.add(cert).unwrap();
    ClientConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(roots)
        .with_no_client_auth()
}

/// hyper-rustls's connector trusting `cert` only, as a hyper-util client.
fn hyper_rustls_client(
    cert: CertificateDer<'static>,
) -> Client<HttpsConnector<HttpConnector>, ReplayBody<Body>> {
    let connector = hyper_rustls::HttpsConnectorBuilder::new()
        .with_tls_config(client_config(cert))
        .https_only()
        .enable_http1()
        .build();
    Client::builder(TokioExecutor::new()).build(connector)
}

impl Service<Uri> for TlsConnector {
    type Response = TokioIo<Tls>;
    type Error = io::Error;
    type Future = Pin<Box<dyn Future<Output = io::Result<TokioIo<Tls>>> + Send>>;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, uri: Uri) -> Self::Future {
        let config = self.0.clone();
        Box::pin(async move {
            let authority = uri.authority().map(|a| a.to_string()).unwrap_or_default();
            let tcp = TcpStream::connect(authority).await?;
            let name = ServerName::try_from("localhost").unwrap();
            let tls = tokio_rustls::TlsConnector::from(config)
                .connect(name, tcp)
                .await?;
            Ok(TokioIo::new(Tls(tls)))
        })
    }
}

fn policy() -> RetryPolicy {
    RetryPolicy::builder()
        .backoff(Duration::from_millis(1), Duration::from_millis(5))
        .build()
        .unwrap()
}

/// Sends `req` through a retry layer over `transport`.
async fn send<S>(transport: S, req: Request<Body>) -> Result<Response<Incoming>, backstop::Error>
where
    S: Service<Request<ReplayBody<Body>>, Response = Response<Incoming>> + Clone,
    S::Error: Into<backstop::BoxError>,
{
    RetryLayer::new(policy())
        .layer(transport)
        .oneshot(req)
        .await
}

async fn within_10s<T>(body: impl Future<Output = T>) -> T {
    tokio::time::timeout(Duration::from_secs(10), body)
        .await
        .expect("test timed out")
}

#[tokio::test]
async fn a_handshake_cut_off_is_retried_for_every_method() {
    within_10s(async {
        for method in [Method::GET, Method::POST, Method::PATCH] {
            let server = tls_server(2).await;
            let connector = TlsConnector::trusting(server.cert.clone());
            // The first connection shows what the client sees: the handshake's EOF.
            let uri: Uri = format!("http://{}/", server.addr).parse().unwrap();
            let err = connector.clone().oneshot(uri.clone()).await.err().unwrap();
            assert_eq!(err.kind(), io::ErrorKind::UnexpectedEof, "{err}");

            let transport: Client<TlsConnector, ReplayBody<Body>> =
                Client::builder(TokioExecutor::new()).build(connector);
            let req = Request::builder()
                .method(method.clone())
                .uri(uri)
                .body(Full::new(Bytes::from_static(b"order")))
                .unwrap();
            let res = send(transport, req).await.unwrap();
            assert_eq!(res.status(), 200, "{method}");
            assert_resent_after_connect_error(&res, &server);
            assert_eq!(server.connections.load(Ordering::SeqCst), 3);
        }
    })
    .await;
}

/// hyper-rustls wraps the handshake's `UnexpectedEof` in an `io::Error` of kind
/// `Other`; the call is re-sent all the same.
#[tokio::test]
async fn a_handshake_cut_off_through_hyper_rustls_is_retried() {
    within_10s(async {
        let server = tls_server(1).await;
        let transport = hyper_rustls_client(server.cert.clone());
        let req = Request::get(format!("https://127.0.0.1:{}/", server.addr.port()))
            .body(Full::new(Bytes::new()))
            .unwrap();
        let res = send(transport, req).await.unwrap();
        assert_eq!(res.status(), 200);
        assert_resent_after_connect_error(&res, &server);
        assert_eq!(server.connections.load(Ordering::SeqCst), 2);
    })
    .await;
}

/// The call took two attempts, the first a connect error, and was served once.
fn assert_resent_after_connect_error(res: &Response<Incoming>, server: &TlsServer) {
    let history = res.extensions().get::<backstop::policy::History>().unwrap();
    assert_eq!(history.len(), 2);
    assert_eq!(
        history.attempts()[0].outcome,
        AttemptOutcome::Error(ErrorKind::Connect)
    );
    assert_eq!(server.served.load(Ordering::SeqCst), 1);
}

/// A certificate the client does not trust, with tokio-rustls and through
/// hyper-rustls: never re-sent.
#[tokio::test]
async fn a_certificate_failure_is_never_retried() {
    within_10s(async {
        let server = tls_server(0).await;
        // The client trusts another certificate.
        let (other, _) = certificate();
        let transport: Client<TlsConnector, ReplayBody<Body>> =
            Client::builder(TokioExecutor::new()).build(TlsConnector::trusting(other.clone()));
        let req = Request::get(format!("http://{}/", server.addr))
            .body(Full::new(Bytes::new()))
            .unwrap();
        assert_refused_once(send(transport, req).await.unwrap_err());

        let transport = hyper_rustls_client(other);
        let req = Request::get(format!("https://127.0.0.1:{}/", server.addr.port()))
            .body(Full::new(Bytes::new()))
            .unwrap();
        assert_refused_once(send(transport, req).await.unwrap_err());
        assert_eq!(server.connections.load(Ordering::SeqCst), 2);
        assert_eq!(server.served.load(Ordering::SeqCst), 0);
    })
    .await;
}

fn assert_refused_once(err: backstop::Error) {
    assert_eq!(err.kind(), ErrorKind::Config);
    assert_eq!(err.attempts(), 1);
    assert_eq!(
        err.stop_reason(),
        Some(StopReason::NotRetryable(NoRetry::Permanent))
    );
}
