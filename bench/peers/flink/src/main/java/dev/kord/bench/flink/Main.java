package dev.kord.bench.flink;

import java.io.IOException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Duration;
import java.util.LinkedHashMap;
import java.util.Map;
import java.util.Optional;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.TimeUnit;
import org.apache.flink.api.common.JobExecutionResult;
import org.apache.flink.api.common.JobStatus;
import org.apache.flink.api.common.eventtime.WatermarkStrategy;
import org.apache.flink.api.common.typeinfo.Types;
import org.apache.flink.configuration.CheckpointingOptions;
import org.apache.flink.configuration.Configuration;
import org.apache.flink.configuration.CoreOptions;
import org.apache.flink.configuration.ExternalizedCheckpointRetention;
import org.apache.flink.configuration.PipelineOptions;
import org.apache.flink.configuration.SecurityOptions;
import org.apache.flink.configuration.StateBackendOptions;
import org.apache.flink.configuration.StateRecoveryOptions;
import org.apache.flink.configuration.WebOptions;
import org.apache.flink.connector.base.DeliveryGuarantee;
import org.apache.flink.connector.kafka.sink.KafkaRecordSerializationSchema;
import org.apache.flink.connector.kafka.sink.KafkaSink;
import org.apache.flink.connector.kafka.source.KafkaSource;
import org.apache.flink.connector.kafka.source.enumerator.initializer.OffsetsInitializer;
import org.apache.flink.core.execution.CheckpointingMode;
import org.apache.flink.core.execution.JobClient;
import org.apache.flink.core.execution.RecoveryClaimMode;
import org.apache.flink.core.execution.SavepointFormatType;
import org.apache.flink.streaming.api.datastream.DataStream;
import org.apache.flink.streaming.api.environment.StreamExecutionEnvironment;
import org.apache.kafka.clients.consumer.OffsetResetStrategy;
import org.apache.logging.log4j.Level;
import org.apache.logging.log4j.core.config.Configurator;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;
import sun.misc.Signal;

/**
 * The Apache Flink peer of kord's benchmark suite: the job of
 * bench/peers/CONTRACT.md on a Flink MiniCluster in this JVM.
 *
 * <p>Kafka source (read_committed) → key by uuid → count in ValueState →
 * Kafka sink (exactly-once, transactions committed when a checkpoint
 * completes). Checkpoints go to the local filesystem under the job's
 * directory, derived from --id, and a new run resumes from the newest one
 * ({@link Resume}). SIGTERM stops the job with a savepoint, which commits
 * the last transactions, and exits 0.
 */
public final class Main {
    private static final Logger LOG = LoggerFactory.getLogger(Main.class);

    /** The flags, with their defaults; the first four have none and are required. */
    private static final String USAGE = """
            usage: run.sh --brokers HOST:PORT --input TOPIC --output TOPIC --id NAME
                          [--parallelism 1] [--commit-ms 1000]
                          [--checkpoint-dir /tmp/kord-bench-flink/NAME]
                          [--stop-timeout-ms 20000] [--transaction-timeout-ms 60000]
                          [--lake DIR [--lake-compact-ms 60000]] [--verbose]
            """;

    private Main() {}

    /** The command line. */
    record Options(
            String brokers,
            String input,
            String output,
            String id,
            int parallelism,
            long commitMs,
            Path dir,
            long stopTimeoutMs,
            long transactionTimeoutMs,
            Path lake,
            long lakeCompactMs,
            boolean verbose) {

        /** Parses --name value and --name=value; throws IllegalArgumentException with the reason. */
        static Options parse(String[] args) {
            Map<String, String> v = new LinkedHashMap<>();
            boolean verbose = false;
            for (int i = 0; i < args.length; i++) {
                String a = args[i];
                if (a.equals("--verbose")) {
                    verbose = true;
                    continue;
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
                    throw new IllegalArgumentException("--" + name + " wants a value");
                }
                switch (name) {
                    case "brokers", "input", "output", "id", "parallelism", "commit-ms",
                            "checkpoint-dir", "stop-timeout-ms", "transaction-timeout-ms",
                            "lake", "lake-compact-ms" -> v.put(name, value);
                    default -> throw new IllegalArgumentException("unknown flag --" + name);
                }
            }
            for (String required : new String[] {"brokers", "input", "output", "id"}) {
                if (v.getOrDefault(required, "").isEmpty()) {
                    throw new IllegalArgumentException("--" + required + " is required");
                }
            }
            String id = v.get("id");
            if (id.contains("/") || id.equals(".") || id.equals("..")) {
                throw new IllegalArgumentException("--id " + id + ": it names a directory, so no '/', '.' or '..'");
            }
            int parallelism = positive(v, "parallelism", 1);
            long commitMs = positive(v, "commit-ms", 1000);
            long stopTimeoutMs = positive(v, "stop-timeout-ms", 20_000);
            long transactionTimeoutMs = positive(v, "transaction-timeout-ms", 60_000);
            Path dir = Path.of(v.getOrDefault("checkpoint-dir", "/tmp/kord-bench-flink/" + id)).toAbsolutePath();
            String lakeDir = v.get("lake");
            if (lakeDir != null && lakeDir.isEmpty()) {
                throw new IllegalArgumentException("--lake wants a directory");
            }
            Path lake = lakeDir == null ? null : Path.of(lakeDir).toAbsolutePath();
            long lakeCompactMs = 60_000;
            if (v.containsKey("lake-compact-ms")) {
                if (lake == null) {
                    throw new IllegalArgumentException("--lake-compact-ms goes with --lake");
                }
                lakeCompactMs = v.get("lake-compact-ms").equals("0") ? 0 : positive(v, "lake-compact-ms", 0);
            }
            return new Options(v.get("brokers"), v.get("input"), v.get("output"), id,
                    parallelism, commitMs, dir, stopTimeoutMs, transactionTimeoutMs, lake, lakeCompactMs, verbose);
        }

        /**
         * --lake-compact-ms in checkpoints, as Flink's compaction counts them
         * (at least 1); 0: no compaction.
         */
        int lakeCompactCheckpoints() {
            return lakeCompactMs == 0 ? 0 : (int) Math.max(1, (lakeCompactMs + commitMs - 1) / commitMs);
        }

        private static int positive(Map<String, String> v, String name, int def) {
            String s = v.get(name);
            if (s == null) {
                return def;
            }
            try {
                int n = Integer.parseInt(s);
                if (n > 0) {
                    return n;
                }
            } catch (NumberFormatException e) {
                // reported below
            }
            throw new IllegalArgumentException("--" + name + " " + s + ": want a positive integer");
        }

        Path checkpoints() {
            return dir.resolve("checkpoints");
        }

        Path savepoints() {
            return dir.resolve("savepoints");
        }

        /** Flink's working files: the RPC system's jar it unpacks, spill and blob directories. */
        Path tmp() {
            return dir.resolve("tmp");
        }
    }

    public static void main(String[] args) {
        Options o;
        try {
            o = Options.parse(args);
        } catch (IllegalArgumentException e) {
            System.err.println("kord-bench-flink: " + e.getMessage());
            System.err.print(USAGE);
            System.exit(2);
            return;
        }
        if (o.verbose()) {
            Configurator.setLevel("dev.kord.bench.flink", Level.INFO);
        }
        try {
            System.exit(run(o));
        } catch (Throwable t) {
            LOG.error("kord-bench-flink: {}", t.toString(), t);
            System.exit(1);
        }
    }

    /**
     * Runs the job until SIGTERM (or SIGINT), then stops it, and returns the
     * exit code: 0 after a stop, 1 if the job ended by itself (it fails for
     * good only when Flink's restart strategy gives up).
     */
    static int run(Options o) throws Exception {
        // The JVM's default SIGTERM handling runs the shutdown hooks, Flink's
        // among them, at once and in parallel with anything we would do to
        // stop the job cleanly. Handling the signal ourselves keeps the
        // MiniCluster whole until the job has stopped.
        CompletableFuture<String> stop = new CompletableFuture<>();
        Signal.handle(new Signal("TERM"), s -> stop.complete("SIGTERM"));
        Signal.handle(new Signal("INT"), s -> stop.complete("SIGINT"));

        Files.createDirectories(o.checkpoints());
        Files.createDirectories(o.savepoints());
        // A killed run leaves its working files (a 20 MB jar among them);
        // nothing in them outlives the run.
        if (Files.exists(o.tmp())) {
            Resume.delete(o.tmp());
        }
        Files.createDirectories(o.tmp());
        Optional<Path> from = Resume.latest(o.checkpoints(), o.savepoints());
        if (from.isPresent()) {
            LOG.info("resuming from {}", from.get());
            Resume.prune(o.checkpoints(), o.savepoints(), from.get());
        } else {
            LOG.info("no checkpoint under {}: starting from group {}'s committed offsets, else the earliest",
                    o.dir(), o.id());
        }

        StreamExecutionEnvironment env =
                StreamExecutionEnvironment.createLocalEnvironment(o.parallelism(), configuration(o, from));
        build(env, o);
        CountFunction.OPENED.set(0);
        JobClient job = env.executeAsync("kord-bench-flink " + o.id());
        CompletableFuture<JobExecutionResult> done = job.getJobExecutionResult();

        if (!awaitRunning(job, o.parallelism(), done, stop)) {
            if (done.isDone()) {
                return ended(done);
            }
            return stopJob(job, done, o, stop.getNow("a signal"));
        }
        System.out.println("ready");
        System.out.flush();

        CompletableFuture.anyOf(done, stop).join();
        if (done.isDone()) {
            return ended(done);
        }
        return stopJob(job, done, o, stop.getNow("a signal"));
    }

    /** The MiniCluster's and the job's configuration. */
    static Configuration configuration(Options o, Optional<Path> from) {
        Configuration c = new Configuration();
        c.set(CheckpointingOptions.CHECKPOINTING_INTERVAL, Duration.ofMillis(o.commitMs()));
        c.set(CheckpointingOptions.CHECKPOINTING_CONSISTENCY_MODE, CheckpointingMode.EXACTLY_ONCE);
        c.set(StateBackendOptions.STATE_BACKEND, "hashmap");
        c.set(CheckpointingOptions.CHECKPOINT_STORAGE, "filesystem");
        c.set(CheckpointingOptions.CHECKPOINTS_DIRECTORY, o.checkpoints().toUri().toString());
        c.set(CheckpointingOptions.SAVEPOINT_DIRECTORY, o.savepoints().toUri().toString());
        // Keep the last checkpoint for the next run when the job is
        // cancelled (a stop that timed out) or fails; a SIGKILL leaves it
        // in any case.
        c.set(CheckpointingOptions.EXTERNALIZED_CHECKPOINT_RETENTION,
                ExternalizedCheckpointRetention.RETAIN_ON_CANCELLATION);
        c.set(CheckpointingOptions.MAX_RETAINED_CHECKPOINTS, 1);
        // Records are not kept past the call that receives them.
        c.set(PipelineOptions.OBJECT_REUSE, true);
        // Under the job's directory instead of /tmp itself, so that the
        // next run can clear what a killed one left.
        c.set(CoreOptions.TMP_DIRS, o.tmp().toString());
        c.set(WebOptions.TMP_DIR, o.tmp().toString());
        // No delegation tokens are used. With Hadoop's classes on the class
        // path (for --lake), the token manager's Hadoop providers would load
        // some 400 of them and look for a Hadoop configuration at every
        // start, --lake or not.
        c.set(SecurityOptions.DELEGATION_TOKENS_ENABLED, false);
        from.ifPresent(p -> {
            c.set(StateRecoveryOptions.SAVEPOINT_PATH, p.toString());
            // The new run owns the checkpoint it resumes from and deletes it
            // once a newer one completes, as it does its own.
            c.set(StateRecoveryOptions.RESTORE_MODE, RecoveryClaimMode.CLAIM);
        });
        return c;
    }

    /** Source → key by uuid → count → sink. The uids keep state matched to operators across runs. */
    static void build(StreamExecutionEnvironment env, Options o) {
        KafkaSource<Event> source = KafkaSource.<Event>builder()
                .setBootstrapServers(o.brokers())
                .setTopics(o.input())
                .setGroupId(o.id())
                .setClientIdPrefix(o.id())
                // Used only when the job has no checkpoint: after one, the
                // source resumes from the offsets in it.
                .setStartingOffsets(OffsetsInitializer.committedOffsets(OffsetResetStrategy.EARLIEST))
                .setValueOnlyDeserializer(new EventSchema(o.lake() != null))
                .setProperty("isolation.level", "read_committed")
                .build();

        KafkaSink<Result> sink = KafkaSink.<Result>builder()
                .setBootstrapServers(o.brokers())
                .setRecordSerializer(KafkaRecordSerializationSchema.<Result>builder()
                        .setTopic(o.output())
                        .setKeySerializationSchema(new ResultSchema.Key())
                        .setValueSerializationSchema(new ResultSchema.Value())
                        .build())
                .setDeliveryGuarantee(DeliveryGuarantee.EXACTLY_ONCE)
                .setTransactionalIdPrefix(o.id())
                // Below the broker's transaction.max.timeout.ms (15 min by
                // default; Flink's own default, 1 h, is refused). Two bounds
                // meet here: a transaction the last checkpoint precommitted
                // must be committed by the next run within this time of its
                // start, or the broker aborts it and its records are lost;
                // and a run killed for good holds back read_committed
                // readers for up to this time.
                .setProperty("transaction.timeout.ms", Long.toString(o.transactionTimeoutMs()))
                .build();

        DataStream<Result> results = env.fromSource(source, WatermarkStrategy.noWatermarks(), "kafka-source")
                .uid("kafka-source")
                .keyBy(e -> e.uuid, Types.STRING)
                .process(new CountFunction())
                .uid("count")
                .name("count");
        results.sinkTo(sink)
                .uid("kafka-sink")
                .name("kafka-sink");
        if (o.lake() != null) {
            // The same results, landed as Parquet: published when the
            // checkpoint that commits them to Kafka completes.
            results.sinkTo(Lake.sink(o.lake(), o.lakeCompactCheckpoints()))
                    .uid("lake-sink")
                    .name("lake-sink");
        }
    }

    /**
     * Waits until the job is RUNNING and every instance of the counting
     * operator has opened (state restored, sink writers connected). Returns
     * false if the job ended or a stop came first.
     */
    private static boolean awaitRunning(JobClient job, int parallelism,
            CompletableFuture<JobExecutionResult> done, CompletableFuture<String> stop) throws Exception {
        while (!done.isDone() && !stop.isDone()) {
            JobStatus status = job.getJobStatus().get(10, TimeUnit.SECONDS);
            if (status == JobStatus.RUNNING && CountFunction.OPENED.get() >= parallelism) {
                return true;
            }
            Thread.sleep(50);
        }
        return false;
    }

    /**
     * Stops the job with a savepoint: Flink takes a last checkpoint, the
     * sink commits its transactions when it completes, and the tasks end.
     * If that does not finish within --stop-timeout-ms, the job is
     * cancelled: what the last completed checkpoint committed stays, and
     * the next run resumes from that checkpoint. Returns 0 either way.
     *
     * <p>With a compacting lake the stop drains: Flink's file compaction
     * holds a bucket's files, hidden, until its next compaction, and only
     * the end of the input (a drained stop, not a plain one) merges and
     * publishes what it holds. Draining also sends the end-of-time
     * watermark, which this job, with no timers or windows, ignores.
     */
    private static int stopJob(JobClient job, CompletableFuture<JobExecutionResult> done, Options o, String why) {
        boolean drain = o.lake() != null && o.lakeCompactCheckpoints() > 0;
        LOG.info("{}: stopping the job with a savepoint{}", why, drain ? ", draining" : "");
        try {
            String savepoint = job.stopWithSavepoint(drain, o.savepoints().toUri().toString(),
                    SavepointFormatType.CANONICAL).get(o.stopTimeoutMs(), TimeUnit.MILLISECONDS);
            LOG.info("stopped; savepoint {}", savepoint);
            done.get(5, TimeUnit.SECONDS);
            return 0;
        } catch (Exception e) {
            LOG.warn("stop with savepoint failed ({}); cancelling the job", e.toString());
        }
        try {
            job.cancel().get(5, TimeUnit.SECONDS);
        } catch (Exception e) {
            LOG.warn("cancel failed: {}", e.toString());
        }
        return 0;
    }

    /** The job ended by itself: with an unbounded source, only by failing for good. */
    private static int ended(CompletableFuture<JobExecutionResult> done) {
        try {
            done.get();
            LOG.error("the job finished on its own");
        } catch (Exception e) {
            LOG.error("the job failed: {}", e.toString(), e);
        }
        return 1;
    }
}
