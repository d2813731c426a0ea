package kord.bench.kstreams;

import com.fasterxml.jackson.core.JsonFactory;
import com.fasterxml.jackson.core.JsonGenerator;
import com.fasterxml.jackson.core.JsonParser;
import com.fasterxml.jackson.core.JsonToken;
import java.io.IOException;
import java.io.StringWriter;
import java.io.UncheckedIOException;
import java.util.Locale;
import java.util.Set;
import org.apache.kafka.common.serialization.Serdes;
import org.apache.kafka.streams.processor.api.Processor;
import org.apache.kafka.streams.processor.api.ProcessorContext;
import org.apache.kafka.streams.processor.api.ProcessorSupplier;
import org.apache.kafka.streams.processor.api.Record;
import org.apache.kafka.streams.processor.api.RecordMetadata;
import org.apache.kafka.streams.state.KeyValueBytesStoreSupplier;
import org.apache.kafka.streams.state.KeyValueStore;
import org.apache.kafka.streams.state.StoreBuilder;
import org.apache.kafka.streams.state.Stores;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

/**
 * CountProcessor counts each user's events in a key-value store and
 * forwards one result per event: {"uuid","seq","count","ts"}, keyed by the
 * event's uuid, ts copied unchanged.
 *
 * <p>The store is keyed by the record key, which is the uuid on the
 * contract's input, so the input partition already holds all of a user's
 * events and no repartition topic is needed. A record without a key is
 * counted under its event's uuid, in the task that read it (see README).
 */
final class CountProcessor implements Processor<String, String, String, String> {
    private static final Logger log = LoggerFactory.getLogger(CountProcessor.class);

    /** STORE names the counts store; its changelog topic is <id>-counts-changelog. */
    static final String STORE = "counts";

    private static final JsonFactory JSON = new JsonFactory();

    /** StoreKind is the --store flag: where the counts live between commits. */
    enum StoreKind {
        ROCKSDB, MEMORY;

        static StoreKind parse(String s) {
            return switch (s) {
                case "rocksdb" -> ROCKSDB;
                case "memory" -> MEMORY;
                default -> throw new IllegalArgumentException("--store " + s + ": want rocksdb or memory");
            };
        }

        @Override
        public String toString() {
            return name().toLowerCase(Locale.ROOT);
        }

        KeyValueBytesStoreSupplier supplier() {
            return switch (this) {
                case ROCKSDB -> Stores.persistentKeyValueStore(STORE);
                case MEMORY -> Stores.inMemoryKeyValueStore(STORE);
            };
        }
    }

    /**
     * Supplier makes one processor per task and declares the store, which
     * Streams then adds to the topology and connects to the processor.
     * Logging (the changelog) is on, as by default; caching is off, as by
     * default for Stores builders, since every event is forwarded anyway.
     */
    static final class Supplier implements ProcessorSupplier<String, String, String, String> {
        private final StoreKind kind;

        Supplier(StoreKind kind) {
            this.kind = kind;
        }

        @Override
        public Processor<String, String, String, String> get() {
            return new CountProcessor();
        }

        @Override
        public Set<StoreBuilder<?>> stores() {
            return Set.of(Stores.keyValueStoreBuilder(kind.supplier(), Serdes.String(), Serdes.Long()));
        }
    }

    private ProcessorContext<String, String> context;
    private KeyValueStore<String, Long> counts;

    @Override
    public void init(ProcessorContext<String, String> context) {
        this.context = context;
        this.counts = context.getStateStore(STORE);
    }

    @Override
    public void process(Record<String, String> record) {
        Event e;
        try {
            e = Event.parse(record.value());
        } catch (IOException | IllegalArgumentException err) {
            // A malformed event is skipped, not counted: it has no seq to
            // answer. The verifier reports it as missing.
            log.warn("skipping malformed event at {}: {}", where(), err.getMessage());
            return;
        }
        String key = record.key() != null ? record.key() : e.uuid;
        Long before = counts.get(key);
        long count = before == null ? 1 : before + 1;
        counts.put(key, count);
        context.forward(new Record<>(e.uuid, e.result(count), record.timestamp()));
    }

    private String where() {
        return context.recordMetadata()
                .map(RecordMetadata::topic)
                .map(t -> t + "[" + context.recordMetadata().get().partition() + "]@"
                        + context.recordMetadata().get().offset())
                .orElse("?");
    }

    /** Event is the part of an input event the job reads. */
    record Event(String uuid, long seq, String ts) {
        /** parse reads uuid, seq and ts and skips every other field. */
        static Event parse(String json) throws IOException {
            if (json == null) {
                throw new IllegalArgumentException("no value");
            }
            String uuid = null;
            String ts = null;
            long seq = 0;
            boolean haveSeq = false;
            try (JsonParser p = JSON.createParser(json)) {
                if (p.nextToken() != JsonToken.START_OBJECT) {
                    throw new IllegalArgumentException("not a JSON object");
                }
                JsonToken t;
                while ((t = p.nextToken()) == JsonToken.FIELD_NAME) {
                    String field = p.currentName();
                    JsonToken v = p.nextToken();
                    switch (field) {
                        case "uuid" -> uuid = text(p, v, field);
                        case "ts" -> ts = text(p, v, field);
                        case "seq" -> {
                            if (v != JsonToken.VALUE_NUMBER_INT) {
                                throw new IllegalArgumentException("seq is not an integer");
                            }
                            seq = p.getLongValue();
                            haveSeq = true;
                        }
                        default -> p.skipChildren();
                    }
                }
                if (t != JsonToken.END_OBJECT) {
                    throw new IllegalArgumentException("unexpected " + t);
                }
            }
            if (uuid == null || ts == null || !haveSeq) {
                throw new IllegalArgumentException("uuid, seq or ts missing");
            }
            return new Event(uuid, seq, ts);
        }

        private static String text(JsonParser p, JsonToken v, String field) throws IOException {
            if (v != JsonToken.VALUE_STRING) {
                throw new IllegalArgumentException(field + " is not a string");
            }
            return p.getText();
        }

        /** result is the output value for this event with the user's count after it. */
        String result(long count) {
            StringWriter w = new StringWriter(160);
            try (JsonGenerator g = JSON.createGenerator(w)) {
                g.writeStartObject();
                g.writeStringField("uuid", uuid);
                g.writeNumberField("seq", seq);
                g.writeNumberField("count", count);
                g.writeStringField("ts", ts);
                g.writeEndObject();
            } catch (IOException err) {
                throw new UncheckedIOException(err); // a StringWriter does not fail
            }
            return w.toString();
        }
    }
}
