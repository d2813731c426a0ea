package kord.bench.kstreams;

import java.io.PrintStream;
import java.nio.file.Path;
import java.time.Duration;
import java.util.Properties;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.atomic.AtomicBoolean;
import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.common.serialization.Serdes;
import org.apache.kafka.streams.CloseOptions;
import org.apache.kafka.streams.KafkaStreams;
import org.apache.kafka.streams.StreamsBuilder;
import org.apache.kafka.streams.StreamsConfig;
import org.apache.kafka.streams.Topology;
import org.apache.kafka.streams.TopologyConfig;
import org.apache.kafka.streams.errors.StreamsUncaughtExceptionHandler;
import org.apache.kafka.streams.kstream.Consumed;
import org.apache.kafka.streams.kstream.Produced;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

/**
 * The Kafka Streams peer of kord's benchmark suite: it counts each user's
 * events in a key-value store and writes one result per event, with
 * exactly_once_v2 (bench/peers/CONTRACT.md).
 *
 * <p>It runs until SIGTERM, which closes the streams client (a final
 * commit) and exits 0, or until a stream thread fails, which exits 1.
 */
public final class Main {
    private static final Logger log = LoggerFactory.getLogger(Main.class);

    /** How long a close may take before the process gives up on it. */
    private static final Duration CLOSE_TIMEOUT = Duration.ofSeconds(10);

    private Main() {}

    public static void main(String[] args) {
        Options o;
        try {
            o = Options.parse(args);
        } catch (Options.Help h) {
            System.out.println(Options.USAGE);
            System.exit(0);
            return;
        } catch (IllegalArgumentException e) {
            System.err.println("kstreams-peer: " + e.getMessage());
            System.err.println(Options.USAGE);
            System.exit(2);
            return;
        }
        System.exit(run(o));
    }

    /**
     * topology is the job: source, count per key, sink. It is built with the
     * client's own configuration, so that the builder does not make and
     * warn about a default one of its own.
     */
    static Topology topology(Options o, Properties config) {
        StreamsBuilder b = new StreamsBuilder(new TopologyConfig(new StreamsConfig(config)));
        b.stream(o.input, Consumed.with(Serdes.String(), Serdes.String()))
                .process(new CountProcessor.Supplier(o.store))
                .to(o.output, Produced.with(Serdes.String(), Serdes.String()));
        return b.build();
    }

    /** config is the streams client's configuration, all of it derived from o. */
    static Properties config(Options o) {
        Properties p = new Properties();
        p.put(StreamsConfig.APPLICATION_ID_CONFIG, o.id);
        p.put(StreamsConfig.BOOTSTRAP_SERVERS_CONFIG, o.brokers);
        p.put(StreamsConfig.PROCESSING_GUARANTEE_CONFIG, StreamsConfig.EXACTLY_ONCE_V2);
        p.put(StreamsConfig.COMMIT_INTERVAL_MS_CONFIG, o.commitMs);
        p.put(StreamsConfig.NUM_STREAM_THREADS_CONFIG, o.parallelism);
        // Streams keeps the job's stores in <state.dir>/<application.id>/.
        p.put(StreamsConfig.STATE_DIR_CONFIG, o.stateDir.toString());
        // Changelog topics on a one-broker cluster.
        p.put(StreamsConfig.REPLICATION_FACTOR_CONFIG, 1);
        p.put(StreamsConfig.consumerPrefix(ConsumerConfig.AUTO_OFFSET_RESET_CONFIG), "earliest");
        if (o.sessionTimeoutMs > 0) {
            p.put(StreamsConfig.consumerPrefix(ConsumerConfig.SESSION_TIMEOUT_MS_CONFIG), o.sessionTimeoutMs);
        }
        // The job has no global stores; this only opts in to the 5.0
        // default early and silences Streams' warning that it is off. The
        // partition assignor reads its copy from the main consumer's
        // configuration, hence the second, prefixed entry.
        p.put(StreamsConfig.PROCESSING_EXCEPTION_HANDLER_GLOBAL_ENABLED_CONFIG, "true");
        p.put(StreamsConfig.mainConsumerPrefix(StreamsConfig.PROCESSING_EXCEPTION_HANDLER_GLOBAL_ENABLED_CONFIG), "true");
        return p;
    }

    static int run(Options o) {
        log.info("application.id={} store={} state.dir={}", o.id, o.store, o.stateDir);
        Properties config = config(o);
        KafkaStreams streams = new KafkaStreams(topology(o, config), config);

        // failed is counted down when the client enters ERROR: a stream
        // thread died and the uncaught-exception handler shut it down.
        CountDownLatch failed = new CountDownLatch(1);
        AtomicBoolean readySaid = new AtomicBoolean();
        PrintStream stdout = System.out;
        streams.setStateListener((now, before) -> {
            if (now == KafkaStreams.State.RUNNING && readySaid.compareAndSet(false, true)) {
                stdout.println("ready");
                stdout.flush();
            }
            if (now == KafkaStreams.State.ERROR) {
                failed.countDown();
            }
        });
        streams.setUncaughtExceptionHandler(e -> {
            log.error("stream thread failed; shutting the client down", e);
            return StreamsUncaughtExceptionHandler.StreamThreadExceptionResponse.SHUTDOWN_CLIENT;
        });

        // On SIGTERM (or SIGINT) the JVM runs this hook and would then exit
        // with 128+signal; the hook closes the client and halts with 0 so
        // that a graceful stop is exit 0, as the contract asks. When this
        // process exits on its own (failed, below), the hook does nothing.
        AtomicBoolean exiting = new AtomicBoolean();
        Runtime.getRuntime().addShutdownHook(new Thread(() -> {
            if (!exiting.compareAndSet(false, true)) {
                return;
            }
            // Leaving the group (Streams stays in it on close by default)
            // lets a restart with the same --id take its partitions back at
            // once instead of after session.timeout.ms.
            boolean closed = streams.close(CloseOptions.groupMembershipOperation(
                            CloseOptions.GroupMembershipOperation.LEAVE_GROUP)
                    .withTimeout(CLOSE_TIMEOUT));
            if (!closed) {
                log.warn("close did not finish within {}", CLOSE_TIMEOUT);
            }
            System.out.flush();
            System.err.flush();
            Runtime.getRuntime().halt(closed ? 0 : 1);
        }, "kstreams-peer-shutdown"));

        try {
            streams.start();
        } catch (RuntimeException e) {
            exiting.set(true);
            log.error("cannot start", e);
            streams.close(CLOSE_TIMEOUT);
            return 1;
        }
        try {
            failed.await();
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
        }
        if (!exiting.compareAndSet(false, true)) {
            // SIGTERM came first; the hook owns the exit.
            return 0;
        }
        streams.close(CLOSE_TIMEOUT);
        return 1;
    }

    /** Options are the command line of bench/peers/CONTRACT.md and the peer's own flags. */
    static final class Options {
        static final String USAGE = String.join("\n",
                "usage: run.sh --brokers HOST:PORT --input TOPIC --output TOPIC --id NAME",
                "              [--parallelism N] [--commit-ms MS] [--store rocksdb|memory] [--state-dir DIR]",
                "              [--session-timeout-ms MS]",
                "  --parallelism  stream threads (num.stream.threads); default 1",
                "  --commit-ms    commit.interval.ms; default 1000",
                "  --store        rocksdb (Stores.persistentKeyValueStore) or memory",
                "                 (Stores.inMemoryKeyValueStore); default rocksdb",
                "  --state-dir    state.dir; the job's stores go to <state-dir>/<id>/;",
                "                 default /tmp/kord-bench-kstreams",
                "  --session-timeout-ms  the consumers' session.timeout.ms: how long the group",
                "                 waits for a killed process before it moves its partitions;",
                "                 default: Kafka's, 45000");

        String brokers;
        String input;
        String output;
        String id;
        int parallelism = 1;
        long commitMs = 1000;
        CountProcessor.StoreKind store = CountProcessor.StoreKind.ROCKSDB;
        Path stateDir = Path.of("/tmp/kord-bench-kstreams");
        int sessionTimeoutMs; // 0: the consumer's default

        /** Help is thrown by parse for -h and --help. */
        static final class Help extends RuntimeException {
            private static final long serialVersionUID = 1L;

            Help() {
                super("help", null, false, false);
            }
        }

        /** parse reads --name value and --name=value pairs; it throws IllegalArgumentException on a bad command line. */
        static Options parse(String[] args) {
            Options o = new Options();
            for (int i = 0; i < args.length; i++) {
                String a = args[i];
                if (a.equals("-h") || a.equals("--help")) {
                    throw new Help();
                }
                if (!a.startsWith("--")) {
                    throw new IllegalArgumentException("unexpected argument " + a);
                }
                String name = a.substring(2);
                String value;
                int eq = name.indexOf('=');
                if (eq >= 0) {
                    value = name.substring(eq + 1);
                    name = name.substring(0, eq);
                } else if (i + 1 < args.length) {
                    value = args[++i];
                } else {
                    throw new IllegalArgumentException("--" + name + " needs a value");
                }
                switch (name) {
                    case "brokers" -> o.brokers = value;
                    case "input" -> o.input = value;
                    case "output" -> o.output = value;
                    case "id" -> o.id = value;
                    case "parallelism" -> o.parallelism = positive(name, value);
                    case "commit-ms" -> o.commitMs = positive(name, value);
                    case "store" -> o.store = CountProcessor.StoreKind.parse(value);
                    case "state-dir" -> o.stateDir = Path.of(value);
                    case "session-timeout-ms" -> o.sessionTimeoutMs = positive(name, value);
                    default -> throw new IllegalArgumentException("unknown flag --" + name);
                }
            }
            require("brokers", o.brokers);
            require("input", o.input);
            require("output", o.output);
            require("id", o.id);
            return o;
        }

        private static void require(String name, String value) {
            if (value == null || value.isEmpty()) {
                throw new IllegalArgumentException("--" + name + " is required");
            }
        }

        private static int positive(String name, String value) {
            int n;
            try {
                n = Integer.parseInt(value);
            } catch (NumberFormatException e) {
                throw new IllegalArgumentException("--" + name + " " + value + ": not a number");
            }
            if (n <= 0) {
                throw new IllegalArgumentException("--" + name + " " + value + ": must be positive");
            }
            return n;
        }
    }
}
