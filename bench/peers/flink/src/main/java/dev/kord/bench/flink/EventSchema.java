package dev.kord.bench.flink;

import com.fasterxml.jackson.core.JsonFactory;
import com.fasterxml.jackson.core.JsonParser;
import com.fasterxml.jackson.core.JsonToken;
import java.io.IOException;
import org.apache.flink.api.common.serialization.DeserializationSchema;
import org.apache.flink.api.common.typeinfo.TypeInformation;
import org.apache.flink.util.Collector;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

/**
 * Parses an input record's value, a JSON event, into an {@link Event}. It
 * streams through the object with Jackson's parser and keeps uuid, seq and
 * ts; ts stays the input's exact string. With keepLakeFields (--lake) it
 * keeps the action and page too.
 *
 * <p>A record that is not such an event (bad JSON, no uuid, no seq) is
 * logged and skipped rather than failing the job: a failed job would
 * restart from its checkpoint and meet the same record again.
 */
final class EventSchema implements DeserializationSchema<Event> {
    private static final long serialVersionUID = 1L;
    private static final Logger LOG = LoggerFactory.getLogger(EventSchema.class);

    private final boolean keepLakeFields;
    private transient JsonFactory json;

    /** keepLakeFields: keep the event's action and page (--lake); else they are read past. */
    EventSchema(boolean keepLakeFields) {
        this.keepLakeFields = keepLakeFields;
    }

    @Override
    public Event deserialize(byte[] message) throws IOException {
        if (message == null) {
            LOG.warn("skipping an input record with no value");
            return null;
        }
        if (json == null) {
            json = new JsonFactory();
        }
        try (JsonParser p = json.createParser(message)) {
            if (p.nextToken() != JsonToken.START_OBJECT) {
                LOG.warn("skipping an input record that is not a JSON object");
                return null;
            }
            String uuid = null;
            String ts = null;
            String action = null;
            String page = null;
            long seq = -1;
            while (p.nextToken() == JsonToken.FIELD_NAME) {
                String field = p.currentName();
                JsonToken value = p.nextToken();
                switch (field) {
                    case "uuid" -> uuid = value == JsonToken.VALUE_STRING ? p.getText() : null;
                    case "seq" -> seq = value == JsonToken.VALUE_NUMBER_INT ? p.getLongValue() : -1;
                    case "ts" -> ts = value == JsonToken.VALUE_STRING ? p.getText() : null;
                    case "action" -> {
                        if (keepLakeFields && value == JsonToken.VALUE_STRING) {
                            action = p.getText();
                        } else {
                            p.skipChildren();
                        }
                    }
                    case "page" -> {
                        if (keepLakeFields && value == JsonToken.VALUE_STRING) {
                            page = p.getText();
                        } else {
                            p.skipChildren();
                        }
                    }
                    default -> p.skipChildren();
                }
            }
            if (uuid == null || seq < 0) {
                LOG.warn("skipping an input event without a uuid or seq");
                return null;
            }
            return new Event(uuid, seq, ts, action, page);
        } catch (IOException e) {
            LOG.warn("skipping an input record that is not valid JSON: {}", e.getMessage());
            return null;
        }
    }

    @Override
    public void deserialize(byte[] message, Collector<Event> out) throws IOException {
        Event e = deserialize(message);
        if (e != null) {
            out.collect(e);
        }
    }

    @Override
    public boolean isEndOfStream(Event next) {
        return false;
    }

    @Override
    public TypeInformation<Event> getProducedType() {
        return TypeInformation.of(Event.class);
    }
}
